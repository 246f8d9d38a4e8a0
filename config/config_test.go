package config

import (
	"os"
	"strings"
	"testing"
)

// Every variable Load reads is documented in the README.
func TestEveryVariableIsDocumented(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range Vars {
		if !strings.Contains(string(readme), "`"+v.Name+"`") {
			t.Errorf("%s is not in the README's configuration table", v.Name)
		}
	}
	src, _ := os.ReadFile("config.go")
	for _, line := range strings.Split(string(src), "\n") {
		i := strings.Index(line, `getenv("MCPGATE_`)
		if i < 0 {
			continue
		}
		name := strings.SplitN(line[i+len(`getenv("`):], `"`, 2)[0]
		found := false
		for _, v := range Vars {
			found = found || v.Name == name
		}
		if !found {
			t.Errorf("%s is read but missing from Vars", name)
		}
	}
}

func TestLoad(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	c, err := Load(env(nil), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != ":8080" || c.EnableSocket || c.SandboxUID != -1 || c.SecretKeyFileSet {
		t.Errorf("defaults: %+v", c)
	}
	if c, _ := Load(env(nil), 0); c.SandboxUID != 65534 {
		t.Errorf("root default sandbox uid = %d", c.SandboxUID)
	}
	for _, bad := range []map[string]string{
		{"MCPGATE_ENABLE_SOCKET": "yes please"},
		{"MCPGATE_SANDBOX_UID": "root"},
		{"MCPGATE_PUBLIC_URL": "ftp://x"},
		{"MCPGATE_JWT_ISSUER": "https://idp"},
		{"MCPGATE_DATABASE_URL": "mysql://db"},
	} {
		for k := range bad {
			if _, err := Load(env(bad), 1000); err == nil || !strings.Contains(err.Error(), k) {
				t.Errorf("%v: err = %v, want one naming %s", bad, err, k)
			}
		}
	}
}
