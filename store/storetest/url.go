package storetest

import (
	"fmt"
	"net/url"
)

func parseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, fmt.Errorf("MCPGATE_TEST_DATABASE_URL must be a postgres:// URL")
	}
	return u, nil
}
