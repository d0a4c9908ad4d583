package migrate

import (
	"context"
	"errors"
	"fmt"
	"testing"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// A lock attempt that timed out is tried again; any other error ends the attempt.
func TestUndecided(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("taking migration lock: %w", &gocql.RequestErrWriteTimeout{}), true},
		{&gocql.RequestErrReadTimeout{}, true},
		{&gocql.RequestErrCASWriteUnknown{}, true},
		{fmt.Errorf("taking migration lock: %w", gocql.ErrTimeoutNoResponse), true},
		{context.DeadlineExceeded, true},
		{errors.New("unconfigured table schema_migrations_lock"), false},
		{context.Canceled, false},
	} {
		if got := undecided(tt.err); got != tt.want {
			t.Errorf("undecided(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
