package e2e

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/dotenv"
	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v4"

	"github.com/mcpgate/mcpgate/config"
)

// repoRoot is the module root, where compose.yaml, the Dockerfile and the
// README live; tests run in e2e/.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// loadCompose loads compose.yaml with the Compose Specification's own loader
// (schema validation included), interpolating from env only, so the result
// does not depend on the machine's environment.
func loadCompose(t *testing.T, env map[string]string) (*types.Project, error) {
	t.Helper()
	root := repoRoot(t)
	return loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  root,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(root, "compose.yaml")}},
		Environment: env,
	})
}

func envExample(t *testing.T) map[string]string {
	t.Helper()
	env, err := dotenv.Read(filepath.Join(repoRoot(t), ".env.example"))
	if err != nil {
		t.Fatalf("reading .env.example: %v", err)
	}
	return env
}

// The compose file loads and validates with .env.example's values, and has
// what a deployment relies on: the gateway waits for a healthy database,
// both are health-checked, each keeps its data on its own named volume, and
// nothing stops `--scale gateway=N`.
func TestComposeFile(t *testing.T) {
	env := envExample(t)
	if env["POSTGRES_PASSWORD"] != "" {
		t.Error(".env.example ships a database password; it must be left for the operator to set")
	}
	env["POSTGRES_PASSWORD"] = "0123456789abcdef0123456789abcdef"
	for _, k := range []string{"MCPGATE_ADMIN_TOKEN", "MCPGATE_SECRET_KEY_FILE", "MCPGATE_SANDBOX_FAIL_CLOSED", "POSTGRES_PASSWORD"} {
		if _, ok := env[k]; !ok {
			t.Errorf(".env.example does not set %s", k)
		}
	}
	p, err := loadCompose(t, env)
	if err != nil {
		t.Fatalf("compose.yaml does not load: %v", err)
	}
	if p.Name != "mcpgate" {
		t.Errorf("project name %q, want mcpgate", p.Name)
	}
	gw, ok := p.Services["gateway"]
	if !ok {
		t.Fatalf("no gateway service; services: %v", p.ServiceNames())
	}
	db, ok := p.Services["db"]
	if !ok {
		t.Fatalf("no db service; services: %v", p.ServiceNames())
	}

	for _, s := range []types.ServiceConfig{gw, db} {
		if s.ContainerName != "" {
			t.Errorf("%s: container_name %q prevents --scale", s.Name, s.ContainerName)
		}
		if s.HealthCheck == nil || s.HealthCheck.Disable || len(s.HealthCheck.Test) < 2 {
			t.Errorf("%s: no healthcheck: %+v", s.Name, s.HealthCheck)
		}
	}
	if want := dockerfileHealthcheck(t); gw.HealthCheck != nil && !slices.Equal([]string(gw.HealthCheck.Test), want) {
		t.Errorf("gateway healthcheck %q, want the image's %q", gw.HealthCheck.Test, want)
	}
	if dep, ok := gw.DependsOn["db"]; !ok || dep.Condition != types.ServiceConditionHealthy {
		t.Errorf("gateway depends_on db = %+v, want condition service_healthy", gw.DependsOn)
	}

	gwVol := namedVolumeAt(gw, "/data")
	dbVol := namedVolumeAt(db, "/var/lib/postgresql/data")
	if gwVol == "" || dbVol == "" || gwVol == dbVol {
		t.Errorf("want distinct named volumes on the gateway's /data and the database's data dir; got %q and %q", gwVol, dbVol)
	}
	for _, v := range []string{gwVol, dbVol} {
		if _, ok := p.Volumes[v]; v != "" && !ok {
			t.Errorf("volume %q is not declared at the top level", v)
		}
	}
	for _, s := range []types.ServiceConfig{gw, db} {
		for _, v := range s.Volumes {
			if strings.Contains(v.Source, "docker.sock") {
				t.Errorf("%s mounts the Docker socket by default", s.Name)
			}
		}
	}

	// Replicas must not fight over one host port: publish nothing, or a range.
	for _, port := range gw.Ports {
		if port.Published != "" && !strings.Contains(port.Published, "-") {
			t.Errorf("gateway publishes the fixed host port %s; a second replica could not start", port.Published)
		}
	}
	if len(db.Ports) != 0 {
		t.Errorf("the database publishes ports %+v; only the gateway needs it", db.Ports)
	}

	url := gw.Environment["MCPGATE_DATABASE_URL"]
	if url == nil || !strings.Contains(*url, "@db:5432/") || !strings.Contains(*url, env["POSTGRES_PASSWORD"]) {
		t.Errorf("MCPGATE_DATABASE_URL = %v; want the db service with the .env password", url)
	}
	if pw := db.Environment["POSTGRES_PASSWORD"]; pw == nil || *pw != env["POSTGRES_PASSWORD"] {
		t.Errorf("db POSTGRES_PASSWORD = %v; want the .env value", pw)
	}
	// The gateway's configuration accepts what compose hands it.
	gwEnv := map[string]string{}
	for k, v := range gw.Environment {
		if v != nil {
			gwEnv[k] = *v
		}
	}
	if _, err := config.Load(func(k string) string { return gwEnv[k] }, 65532); err != nil {
		t.Errorf("the gateway would refuse the compose environment: %v", err)
	}

	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^\s*#\s*-\s*/var/run/docker\.sock:/var/run/docker\.sock`).Match(raw) ||
		!strings.Contains(string(raw), "WARNING") {
		t.Error("compose.yaml lacks the commented-out Docker socket mount with its warning")
	}
}

// Without a database password (as .env.example ships) the file refuses to
// load, instead of starting PostgreSQL with an empty one.
func TestComposeNeedsPostgresPassword(t *testing.T) {
	env := envExample(t)
	for _, tt := range []struct {
		name string
		env  map[string]string
	}{{"as shipped", env}, {"unset", map[string]string{}}} {
		if _, err := loadCompose(t, tt.env); err == nil || !strings.Contains(err.Error(), "POSTGRES_PASSWORD") {
			t.Errorf("%s: loading without POSTGRES_PASSWORD: err = %v; want one naming it", tt.name, err)
		}
	}
}

// Every variable the compose file interpolates is set in .env.example, and
// every variable either file names is documented in the README; the MCPGATE_
// ones are also variables the binary reads.
func TestComposeVariablesDocumented(t *testing.T) {
	root := repoRoot(t)
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	compose, example, readme := read("compose.yaml"), read(".env.example"), read("README.md")
	env := envExample(t)

	interpolated := map[string]bool{}
	for _, m := range regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)`).FindAllStringSubmatch(uncommented(compose), -1) {
		interpolated[m[1]] = true
	}
	if len(interpolated) == 0 {
		t.Fatal("found no ${VAR} in compose.yaml")
	}
	for v := range interpolated {
		if _, ok := env[v]; !ok {
			t.Errorf("compose.yaml uses ${%s}, which .env.example does not set", v)
		}
	}

	read_ := map[string]bool{}
	for _, v := range config.Vars {
		read_[v.Name] = true
	}
	named := map[string]bool{}
	for v := range env {
		named[v] = true
	}
	for v := range interpolated {
		named[v] = true
	}
	for _, m := range regexp.MustCompile(`MCPGATE_[A-Z0-9_]+`).FindAllString(compose+example, -1) {
		named[m] = true
	}
	for v := range named {
		if !strings.Contains(readme, "`"+v+"`") {
			t.Errorf("%s is used by compose.yaml or .env.example but not documented in README.md", v)
		}
		if strings.HasPrefix(v, "MCPGATE_") && !read_[v] {
			t.Errorf("%s is set for the gateway, which does not read it (not in config.Vars)", v)
		}
	}
}

// uncommented drops YAML comment lines, where commented-out examples live.
func uncommented(s string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line)
		}
	}
	return b.String()
}

func namedVolumeAt(s types.ServiceConfig, target string) string {
	for _, v := range s.Volumes {
		if v.Target == target && v.Type == types.VolumeTypeVolume {
			return v.Source
		}
	}
	return ""
}

// dockerfileHealthcheck returns the exec form of the slim target's
// HEALTHCHECK, as compose writes it: ["CMD", args...].
func dockerfileHealthcheck(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^HEALTHCHECK .*CMD \[(.*)\]\s*$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("the Dockerfile has no exec-form HEALTHCHECK")
	}
	out := []string{"CMD"}
	for _, f := range strings.Split(string(m[1]), ",") {
		out = append(out, strings.Trim(strings.TrimSpace(f), `"`))
	}
	return out
}

// k8sContainer is the part of a container spec the deployment test reads.
type k8sContainer struct {
	Name  string `yaml:"name"`
	Image string `yaml:"image"`
	Env   []struct {
		Name string `yaml:"name"`
	} `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	ReadinessProbe  *k8sProbe `yaml:"readinessProbe"`
	LivenessProbe   *k8sProbe `yaml:"livenessProbe"`
	StartupProbe    *k8sProbe `yaml:"startupProbe"`
	SecurityContext struct {
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   bool  `yaml:"readOnlyRootFilesystem"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
}

type k8sProbe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"`
	} `yaml:"httpGet"`
}

// The Kubernetes deployment probes /readyz for readiness and /healthz for
// liveness on the container's port, runs the image's non-root uid with no
// capabilities on a read-only root, and sets only variables the gateway reads.
func TestKubernetesManifests(t *testing.T) {
	dir := filepath.Join(repoRoot(t), "deploy", "kubernetes")
	var kust struct {
		Resources []string `yaml:"resources"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &kust); err != nil || len(kust.Resources) == 0 {
		t.Fatalf("kustomization.yaml: %v, resources %v", err, kust.Resources)
	}
	kinds := map[string]bool{}
	var dep struct {
		Spec struct {
			Replicas int `yaml:"replicas"`
			Template struct {
				Spec struct {
					SecurityContext struct {
						RunAsNonRoot bool `yaml:"runAsNonRoot"`
						RunAsUser    int  `yaml:"runAsUser"`
					} `yaml:"securityContext"`
					InitContainers []k8sContainer `yaml:"initContainers"`
					Containers     []k8sContainer `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	for _, r := range kust.Resources {
		b, err := os.ReadFile(filepath.Join(dir, r))
		if err != nil {
			t.Fatalf("kustomization names %s: %v", r, err)
		}
		var head struct {
			APIVersion string `yaml:"apiVersion"`
			Kind       string `yaml:"kind"`
		}
		if err := yaml.Unmarshal(b, &head); err != nil || head.APIVersion == "" || head.Kind == "" {
			t.Fatalf("%s: %v (apiVersion %q, kind %q)", r, err, head.APIVersion, head.Kind)
		}
		kinds[head.Kind] = true
		if head.Kind == "Deployment" {
			if err := yaml.Unmarshal(b, &dep); err != nil {
				t.Fatalf("%s: %v", r, err)
			}
		}
	}
	for _, k := range []string{"Deployment", "Service"} {
		if !kinds[k] {
			t.Errorf("no %s among %v", k, kust.Resources)
		}
	}
	pod := dep.Spec.Template.Spec
	if dep.Spec.Replicas < 2 {
		t.Errorf("replicas %d; the manifests are for more than one replica", dep.Spec.Replicas)
	}
	if !pod.SecurityContext.RunAsNonRoot || pod.SecurityContext.RunAsUser != 65532 {
		t.Errorf("pod securityContext %+v; want runAsNonRoot and the image's uid 65532", pod.SecurityContext)
	}
	var gw *k8sContainer
	for i := range pod.Containers {
		if pod.Containers[i].Image == "mcpgate" {
			gw = &pod.Containers[i]
		}
	}
	if gw == nil {
		t.Fatal("no container runs the mcpgate image")
	}
	if len(gw.Ports) != 1 || gw.Ports[0].ContainerPort != 8080 {
		t.Errorf("ports %+v; want 8080, the image's MCPGATE_LISTEN", gw.Ports)
	}
	for _, p := range []struct {
		name, path string
		probe      *k8sProbe
	}{
		{"readinessProbe", "/readyz", gw.ReadinessProbe},
		{"livenessProbe", "/healthz", gw.LivenessProbe},
	} {
		got := ""
		if pr := p.probe; pr != nil && pr.HTTPGet != nil && (pr.HTTPGet.Port == gw.Ports[0].Name || pr.HTTPGet.Port == 8080) {
			got = pr.HTTPGet.Path
		}
		if got != p.path {
			t.Errorf("%s checks %q; want GET %s on the container's port", p.name, got, p.path)
		}
	}
	for _, c := range append(pod.InitContainers, *gw) {
		sc := c.SecurityContext
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || !sc.ReadOnlyRootFilesystem || !slices.Equal(sc.Capabilities.Drop, []string{"ALL"}) {
			t.Errorf("container %s securityContext %+v; want no privilege escalation, read-only root, drop ALL", c.Name, sc)
		}
	}
	read := map[string]bool{}
	for _, v := range config.Vars {
		read[v.Name] = true
	}
	for _, e := range gw.Env {
		if !read[e.Name] {
			t.Errorf("the deployment sets %s, which the gateway does not read", e.Name)
		}
	}
}
