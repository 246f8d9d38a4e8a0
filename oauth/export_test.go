package oauth

import (
	"testing"

	"github.com/mcpgate/mcpgate/store/storetest"
)

// What the external tests (package oauth_test, which may import the HTTP
// server) need of this package's test fixtures.

func NewTestAS(t testing.TB) *testAS             { return newTestAS(t) }
func NewTestRS(t testing.TB, as *testAS) *testRS { return newTestRS(t, as) }
func (rs *testRS) Endpoint() string              { return rs.endpoint }
func Database(t testing.TB) *storetest.DB        { needDB(t); return testDB }
