package main

import "github.com/labstack/echo/v4"

// watchRoutes registers the live change feed.
func (a *api) watchRoutes(e *echo.Echo) {}
