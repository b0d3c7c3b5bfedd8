package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

var (
	k8sDir     = filepath.Join("kubernetes")
	composeDir = filepath.Join("compose")
)

// Kubernetes objects, the fields the tests read.
type (
	meta struct {
		Name        string            `yaml:"name"`
		Labels      map[string]string `yaml:"labels"`
		Annotations map[string]string `yaml:"annotations"`
	}
	keyRef struct {
		Name string `yaml:"name"`
		Key  string `yaml:"key"`
	}
	envVar struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			SecretKeyRef    *keyRef `yaml:"secretKeyRef"`
			ConfigMapKeyRef *keyRef `yaml:"configMapKeyRef"`
		} `yaml:"valueFrom"`
	}
	probe struct {
		HTTPGet *struct {
			Path string `yaml:"path"`
			Port any    `yaml:"port"`
		} `yaml:"httpGet"`
		Exec *struct {
			Command []string `yaml:"command"`
		} `yaml:"exec"`
	}
	container struct {
		Name    string   `yaml:"name"`
		Image   string   `yaml:"image"`
		Command []string `yaml:"command"`
		Args    []string `yaml:"args"`
		Env     []envVar `yaml:"env"`
		EnvFrom []struct {
			ConfigMapRef *struct {
				Name string `yaml:"name"`
			} `yaml:"configMapRef"`
			SecretRef *struct {
				Name string `yaml:"name"`
			} `yaml:"secretRef"`
		} `yaml:"envFrom"`
		Ports []struct {
			Name          string `yaml:"name"`
			ContainerPort int    `yaml:"containerPort"`
		} `yaml:"ports"`
		LivenessProbe  *probe `yaml:"livenessProbe"`
		ReadinessProbe *probe `yaml:"readinessProbe"`
		StartupProbe   *probe `yaml:"startupProbe"`
		Resources      struct {
			Requests map[string]string `yaml:"requests"`
			Limits   map[string]string `yaml:"limits"`
		} `yaml:"resources"`
		SecurityContext struct {
			AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
			ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
			Capabilities             struct {
				Drop []string `yaml:"drop"`
			} `yaml:"capabilities"`
		} `yaml:"securityContext"`
	}
	podTemplate struct {
		Metadata meta `yaml:"metadata"`
		Spec     struct {
			TerminationGracePeriodSeconds *int `yaml:"terminationGracePeriodSeconds"`
			SecurityContext               struct {
				RunAsNonRoot *bool `yaml:"runAsNonRoot"`
			} `yaml:"securityContext"`
			Containers []container `yaml:"containers"`
		} `yaml:"spec"`
	}
	workload struct { // Deployment, Job
		Metadata meta `yaml:"metadata"`
		Spec     struct {
			Replicas *int `yaml:"replicas"`
			Selector struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"selector"`
			Template podTemplate `yaml:"template"`
		} `yaml:"spec"`
	}
	configMap struct { // ConfigMap, Secret
		Metadata   meta              `yaml:"metadata"`
		Data       map[string]string `yaml:"data"`
		StringData map[string]string `yaml:"stringData"`
	}
	service struct {
		Metadata meta `yaml:"metadata"`
		Spec     struct {
			ClusterIP string            `yaml:"clusterIP"`
			Selector  map[string]string `yaml:"selector"`
			Ports     []struct {
				Name       string `yaml:"name"`
				Port       int    `yaml:"port"`
				TargetPort any    `yaml:"targetPort"`
			} `yaml:"ports"`
		} `yaml:"spec"`
	}
	pdb struct {
		Metadata meta `yaml:"metadata"`
		Spec     struct {
			MinAvailable   any `yaml:"minAvailable"`
			MaxUnavailable any `yaml:"maxUnavailable"`
			Selector       struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"selector"`
		} `yaml:"spec"`
	}
)

// k8sKit is deploy/kubernetes, parsed.
type k8sKit struct {
	resources   []string // kustomization.yaml's
	deployments []workload
	jobs        []workload
	configMaps  map[string]configMap
	secrets     map[string]configMap // secret.example.yaml's
	services    []service
	pdbs        []pdb
}

// loadK8s reads every YAML file of deploy/kubernetes.
func loadK8s(t *testing.T) *k8sKit {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", k8sDir, err)
	}
	kit := &k8sKit{configMaps: map[string]configMap{}, secrets: map[string]configMap{}}
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		for {
			var node yaml.Node
			if err := dec.Decode(&node); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			var head struct {
				Kind      string   `yaml:"kind"`
				Resources []string `yaml:"resources"`
			}
			decode(t, file, &node, &head)
			switch head.Kind {
			case "Kustomization":
				kit.resources = head.Resources
			case "Deployment":
				kit.deployments = append(kit.deployments, decodeAs[workload](t, file, &node))
			case "Job":
				kit.jobs = append(kit.jobs, decodeAs[workload](t, file, &node))
			case "ConfigMap":
				cm := decodeAs[configMap](t, file, &node)
				kit.configMaps[cm.Metadata.Name] = cm
			case "Secret":
				s := decodeAs[configMap](t, file, &node)
				kit.secrets[s.Metadata.Name] = s
			case "Service":
				kit.services = append(kit.services, decodeAs[service](t, file, &node))
			case "PodDisruptionBudget":
				kit.pdbs = append(kit.pdbs, decodeAs[pdb](t, file, &node))
			}
		}
	}
	return kit
}

func decode(t *testing.T, file string, node *yaml.Node, v any) {
	t.Helper()
	if err := node.Decode(v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

func decodeAs[T any](t *testing.T, file string, node *yaml.Node) T {
	t.Helper()
	var v T
	decode(t, file, node, &v)
	return v
}

// relayDeployment returns the one Deployment and its relay container.
func (kit *k8sKit) relayDeployment(t *testing.T) (workload, container) {
	t.Helper()
	if len(kit.deployments) != 1 || len(kit.deployments[0].Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("want one Deployment with one container, have %d Deployments", len(kit.deployments))
	}
	d := kit.deployments[0]
	return d, d.Spec.Template.Spec.Containers[0]
}

// containerEnv is a container's environment as the kubelet builds it:
// envFrom's ConfigMaps and Secrets, then env. A Secret's values are
// secret.example.yaml's. Each name maps to where it came from.
func (kit *k8sKit) containerEnv(t *testing.T, c container) (values, sources map[string]string) {
	t.Helper()
	values, sources = map[string]string{}, map[string]string{}
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			cm, ok := kit.configMaps[from.ConfigMapRef.Name]
			if !ok {
				t.Fatalf("container %s: envFrom ConfigMap %q is not in %s", c.Name, from.ConfigMapRef.Name, k8sDir)
			}
			for k, v := range cm.Data {
				values[k], sources[k] = v, "ConfigMap "+cm.Metadata.Name
			}
		case from.SecretRef != nil:
			s, ok := kit.secrets[from.SecretRef.Name]
			if !ok {
				t.Fatalf("container %s: envFrom Secret %q has no example in %s", c.Name, from.SecretRef.Name, k8sDir)
			}
			for k, v := range s.StringData {
				values[k], sources[k] = v, "Secret "+s.Metadata.Name
			}
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			values[e.Name], sources[e.Name] = e.Value, "env"
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			v, ok := kit.secrets[ref.Name].StringData[ref.Key]
			if !ok {
				t.Errorf("container %s: %s from Secret %s key %s, which secret.example.yaml does not have", c.Name, e.Name, ref.Name, ref.Key)
			}
			values[e.Name], sources[e.Name] = v, "Secret "+ref.Name
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			v, ok := kit.configMaps[ref.Name].Data[ref.Key]
			if !ok {
				t.Errorf("container %s: %s from ConfigMap %s key %s, which it does not have", c.Name, e.Name, ref.Name, ref.Key)
			}
			values[e.Name], sources[e.Name] = v, "ConfigMap "+ref.Name
		}
	}
	return values, sources
}

// goRuntimeVars are the variables a relay's environment may hold that are
// the Go runtime's, not relay's.
var goRuntimeVars = map[string]bool{"GOMEMLIMIT": true, "GOMAXPROCS": true, "GOGC": true, "GODEBUG": true}

// checkEnv fails the test for each variable of env that the relay command
// does not read: OUTBOX_* must be in its help, OTEL_* in cmd/relay's
// source (relay run reads the standard OpenTelemetry variables, which its
// help does not list).
func checkEnv(t *testing.T, where string, cf commandFlags, command string, env map[string]string) {
	t.Helper()
	for name := range env {
		switch {
		case strings.HasPrefix(name, "OUTBOX_"):
			if !cf.vars[name] {
				t.Errorf("%s sets %s, which relay %s --help does not list", where, name, command)
			}
		case strings.HasPrefix(name, "OTEL_"):
			if command != "run" || !otelVars(t)[name] {
				t.Errorf("%s sets %s, which relay %s does not read", where, name, command)
			}
		case goRuntimeVars[name]:
		default:
			t.Errorf("%s sets %s, which neither relay nor the Go runtime reads", where, name)
		}
	}
}

// otelVars are the OTEL_* names cmd/relay's non-test sources mention.
func otelVars(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "cmd", "relay", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]bool{}
	re := regexp.MustCompile(`"(OTEL_[A-Z0-9_]+)"`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllSubmatch(src, -1) {
			vars[string(m[1])] = true
		}
	}
	return vars
}

// metricsPort is the port of the relay's metrics listener given by args
// or env (the flag wins), or "" when none is set.
func metricsPort(t *testing.T, where string, args []string, env map[string]string) string {
	t.Helper()
	addr, ok := flagValue(args, "metrics-addr")
	if !ok {
		addr = env["OUTBOX_METRICS_ADDR"]
	}
	if addr == "" {
		return ""
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s: metrics address %q: %v", where, addr, err)
	}
	return port
}

// shutdownBound reads cmd/relay/shutdown.go: the documented bound on the
// time from SIGTERM to exit beyond --shutdown-timeout ("The process exits
// within --shutdown-timeout + 2s"), checked against the constants it is
// made of (runGrace, and closeBound for closing the sink and the pool).
func shutdownBound(t *testing.T) time.Duration {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoRoot, "cmd", "relay", "shutdown.go"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`exits within --shutdown-timeout \+ (\S+?) of SIGTERM`).FindSubmatch(src)
	if m == nil {
		t.Fatal("cmd/relay/shutdown.go no longer says the process exits within --shutdown-timeout + X of SIGTERM")
	}
	bound, err := time.ParseDuration(string(m[1]))
	if err != nil {
		t.Fatal(err)
	}
	constant := func(name string) time.Duration {
		m := regexp.MustCompile(`\b` + name + `\s*=\s*(\d+)\s*\*\s*time\.(Millisecond|Second)`).FindSubmatch(src)
		if m == nil {
			t.Fatalf("cmd/relay/shutdown.go: no constant %s = N * time.Millisecond|Second", name)
		}
		n, _ := strconv.Atoi(string(m[1]))
		if string(m[2]) == "Second" {
			return time.Duration(n) * time.Second
		}
		return time.Duration(n) * time.Millisecond
	}
	if parts := constant("runGrace") + 2*constant("closeBound"); parts > bound {
		t.Fatalf("shutdown.go documents + %v but runGrace + 2 x closeBound is %v", bound, parts)
	}
	return bound
}

// shutdownTimeout is the --shutdown-timeout args and env give, or the
// default relay run --help shows.
func shutdownTimeout(t *testing.T, args []string, env map[string]string) time.Duration {
	t.Helper()
	v, ok := flagValue(args, "shutdown-timeout")
	if !ok {
		v, ok = env["OUTBOX_SHUTDOWN_TIMEOUT"]
	}
	if !ok {
		v = defaultOf(t, help(t, "run"), "shutdown-timeout")
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("shutdown timeout %q: %v", v, err)
	}
	return d
}

func TestKubernetesKustomization(t *testing.T) {
	kit := loadK8s(t)
	files, _ := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	listed := map[string]bool{}
	for _, r := range kit.resources {
		listed[r] = true
		if _, err := os.Stat(filepath.Join(k8sDir, r)); err != nil {
			t.Errorf("kustomization.yaml lists %s: %v", r, err)
		}
	}
	for _, f := range files {
		base := filepath.Base(f)
		switch {
		case base == "kustomization.yaml":
		case strings.Contains(base, ".example."):
			if listed[base] {
				t.Errorf("kustomization.yaml applies %s, an example with a placeholder credential", base)
			}
		case !listed[base]:
			t.Errorf("kustomization.yaml does not list %s", base)
		}
	}
	if len(kit.deployments) != 1 || len(kit.jobs) != 1 || len(kit.pdbs) != 1 || len(kit.services) != 1 {
		t.Fatalf("want one Deployment, Job, PodDisruptionBudget and Service: %d, %d, %d, %d",
			len(kit.deployments), len(kit.jobs), len(kit.pdbs), len(kit.services))
	}
}

// TestKubernetesRelayDeployment: the relays run relay run with flags and
// variables it has, probes on the port and paths of its metrics listener,
// a grace period above the process's shutdown bound, and the hardening the
// kit promises.
func TestKubernetesRelayDeployment(t *testing.T) {
	kit := loadK8s(t)
	d, c := kit.relayDeployment(t)
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		t.Errorf("Deployment replicas %v, want several", d.Spec.Replicas)
	}
	if len(c.Command) != 0 {
		t.Errorf("container overrides the image's ENTRYPOINT with %v", c.Command)
	}
	if len(c.Args) == 0 || c.Args[0] != "run" {
		t.Fatalf("container args %v, want run ...", c.Args)
	}
	run := flagsOf(t, "run")
	checkArgs(t, "Deployment args", run, c.Args[1:])
	env, sources := kit.containerEnv(t, c)
	checkEnv(t, "Deployment", run, "run", env)
	if env["OUTBOX_DATABASE_URL"] == "" || !strings.HasPrefix(sources["OUTBOX_DATABASE_URL"], "Secret") {
		t.Errorf("OUTBOX_DATABASE_URL comes from %q, want a Secret", sources["OUTBOX_DATABASE_URL"])
	}
	for name, src := range sources {
		if strings.Contains(name, "PASSWORD") || strings.Contains(name, "SECRET") || strings.Contains(name, "TOKEN") {
			if !strings.HasPrefix(src, "Secret") {
				t.Errorf("%s comes from %s, want a Secret", name, src)
			}
		}
	}

	// Probes: on the metrics listener's port, by name or number.
	port := metricsPort(t, "Deployment", c.Args[1:], env)
	if port == "" {
		t.Fatal("the relays serve no metrics listener: the probes would find nothing")
	}
	portNames := map[string]string{}
	for _, p := range c.Ports {
		portNames[p.Name] = strconv.Itoa(p.ContainerPort)
	}
	if d.Spec.Template.Metadata.Annotations["prometheus.io/port"] != port {
		t.Errorf("prometheus.io/port %q, the relays listen on %s", d.Spec.Template.Metadata.Annotations["prometheus.io/port"], port)
	}
	for name, p := range map[string]*probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("no %s httpGet probe", name)
			continue
		}
		probePort := fmt.Sprint(p.HTTPGet.Port)
		if named, ok := portNames[probePort]; ok {
			probePort = named
		}
		if probePort != port {
			t.Errorf("%s probe on port %v (%s), the metrics listener is on %s", name, p.HTTPGet.Port, probePort, port)
		}
	}
	if c.LivenessProbe != nil && c.LivenessProbe.HTTPGet != nil && c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("liveness probe asks %s, want /healthz", c.LivenessProbe.HTTPGet.Path)
	}
	if c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil && c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe asks %s, want /readyz", c.ReadinessProbe.HTTPGet.Path)
	}

	// Grace period above the shutdown timeout plus the process's own bound.
	grace := d.Spec.Template.Spec.TerminationGracePeriodSeconds
	if grace == nil {
		t.Fatal("no terminationGracePeriodSeconds: Kubernetes' default is 30s whatever the relay's shutdown timeout")
	}
	timeout, bound := shutdownTimeout(t, c.Args[1:], env), shutdownBound(t)
	if g := time.Duration(*grace) * time.Second; g <= timeout+bound {
		t.Errorf("terminationGracePeriodSeconds %d, but the relay may take --shutdown-timeout %v + %v to exit", *grace, timeout, bound)
	} else {
		t.Logf("grace period %v > shutdown timeout %v + exit bound %v (margin %v)", g, timeout, bound, g-timeout-bound)
	}

	// Resources and hardening.
	for _, r := range []string{"cpu", "memory"} {
		if c.Resources.Requests[r] == "" {
			t.Errorf("no %s request", r)
		}
	}
	if c.Resources.Limits["memory"] == "" {
		t.Error("no memory limit")
	}
	checkHardened(t, "Deployment", d, c)

	// The Service and the PodDisruptionBudget select the relays.
	labels := d.Spec.Template.Metadata.Labels
	if !selects(d.Spec.Selector.MatchLabels, labels) {
		t.Errorf("Deployment selector %v does not match its pods %v", d.Spec.Selector.MatchLabels, labels)
	}
	s := kit.services[0]
	if s.Spec.ClusterIP != "None" {
		t.Errorf("Service clusterIP %q, want None (headless: nothing calls the relays)", s.Spec.ClusterIP)
	}
	if !selects(s.Spec.Selector, labels) {
		t.Errorf("Service selector %v does not match the relays %v", s.Spec.Selector, labels)
	}
	for _, sp := range s.Spec.Ports {
		target := fmt.Sprint(sp.TargetPort)
		if named, ok := portNames[target]; ok {
			target = named
		}
		if target != port {
			t.Errorf("Service port %s targets %v, the metrics listener is on %s", sp.Name, sp.TargetPort, port)
		}
	}
	p := kit.pdbs[0]
	if !selects(p.Spec.Selector.MatchLabels, labels) {
		t.Errorf("PodDisruptionBudget selector %v does not match the relays %v", p.Spec.Selector.MatchLabels, labels)
	}
	if p.Spec.MaxUnavailable == nil && p.Spec.MinAvailable == nil {
		t.Error("PodDisruptionBudget sets neither maxUnavailable nor minAvailable")
	}
}

// TestKubernetesMigrationJob: the Job runs relay migrate up with variables
// it has, on the table the relays use.
func TestKubernetesMigrationJob(t *testing.T) {
	kit := loadK8s(t)
	d, rc := kit.relayDeployment(t)
	j := kit.jobs[0]
	if len(j.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("Job has %d containers, want 1", len(j.Spec.Template.Spec.Containers))
	}
	c := j.Spec.Template.Spec.Containers[0]
	if len(c.Args) < 2 || c.Args[0] != "migrate" || c.Args[1] != "up" {
		t.Fatalf("Job args %v, want migrate up", c.Args)
	}
	if c.Image != rc.Image {
		t.Errorf("Job image %s, relays' %s", c.Image, rc.Image)
	}
	migrate := flagsOf(t, "migrate")
	checkArgs(t, "Job args", migrate, c.Args[2:])
	env, _ := kit.containerEnv(t, c)
	checkEnv(t, "migration Job", migrate, "migrate", env)
	relayEnv, _ := kit.containerEnv(t, rc)
	for _, v := range []string{"OUTBOX_DATABASE_URL", "OUTBOX_SCHEMA", "OUTBOX_TABLE"} {
		if env[v] != relayEnv[v] {
			t.Errorf("the Job's %s is %q, the relays' %q", v, env[v], relayEnv[v])
		}
	}
	checkHardened(t, "Job", j, c)
	_ = d
}

func checkHardened(t *testing.T, where string, w workload, c container) {
	t.Helper()
	if nr := w.Spec.Template.Spec.SecurityContext.RunAsNonRoot; nr == nil || !*nr {
		t.Errorf("%s: runAsNonRoot is not true", where)
	}
	sc := c.SecurityContext
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("%s: readOnlyRootFilesystem is not true", where)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("%s: allowPrivilegeEscalation is not false", where)
	}
	if len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("%s: capabilities drop %v, want [ALL]", where, sc.Capabilities.Drop)
	}
}

// selects reports whether every label of selector is in labels.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// Compose, the fields the tests read.
type (
	composeService struct {
		Image string `yaml:"image"`
		Build *struct {
			Context string `yaml:"context"`
		} `yaml:"build"`
		Command     []string          `yaml:"command"`
		Entrypoint  []string          `yaml:"entrypoint"`
		Environment map[string]string `yaml:"environment"`
		Healthcheck *struct {
			Test    []string `yaml:"test"`
			Disable bool     `yaml:"disable"`
		} `yaml:"healthcheck"`
		StopGracePeriod string   `yaml:"stop_grace_period"`
		Volumes         []string `yaml:"volumes"`
	}
	composeFile struct {
		Services map[string]composeService `yaml:"services"`
	}
)

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(composeDir, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var f composeFile
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	return f
}

// relayServices are the compose services that run the relay's image (built
// from the repository's Dockerfile), by name.
func (f composeFile) relayServices(t *testing.T) map[string]composeService {
	t.Helper()
	out := map[string]composeService{}
	for name, s := range f.Services {
		if s.Build != nil {
			if filepath.Clean(filepath.Join(composeDir, s.Build.Context)) != filepath.Clean(repoRoot) {
				t.Errorf("service %s builds %s, not the repository's Dockerfile", name, s.Build.Context)
			}
			out[name] = s
		}
	}
	if len(out) == 0 {
		t.Fatal("compose.yaml has no service built from the Dockerfile")
	}
	return out
}

// mount returns the host path (relative to deploy/compose) a service
// mounts at target.
func (s composeService) mount(target string) (string, bool) {
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && parts[1] == target {
			return parts[0], true
		}
	}
	return "", false
}

// TestComposeRelays: the relay services pass relay flags and variables it
// has; the relays' metrics listener is where the image's HEALTHCHECK and
// Prometheus look; there are three of them; the stop grace period covers
// the shutdown bound.
func TestComposeRelays(t *testing.T) {
	f := loadCompose(t)
	hc := dockerHealthcheck(t)
	runners := 0
	for name, s := range f.relayServices(t) {
		if len(s.Entrypoint) != 0 {
			t.Errorf("service %s overrides the image's ENTRYPOINT", name)
		}
		if len(s.Command) == 0 {
			t.Errorf("service %s gives no command", name)
			continue
		}
		command := s.Command[0]
		cf := flagsOf(t, command)
		rest := s.Command[1:]
		if command == "migrate" && len(rest) > 0 {
			rest = rest[1:] // up
		}
		checkArgs(t, "service "+name, cf, rest)
		checkEnv(t, "service "+name, cf, command, s.Environment)
		if command != "run" {
			if s.Healthcheck == nil || !s.Healthcheck.Disable {
				t.Errorf("service %s (%s) keeps the image's HEALTHCHECK but serves no health endpoint", name, command)
			}
			continue
		}
		runners++
		port := metricsPort(t, "service "+name, rest, s.Environment)
		if port == "" {
			port = metricsPort(t, "the image", nil, map[string]string{"OUTBOX_METRICS_ADDR": dockerfileEnv(t)["OUTBOX_METRICS_ADDR"]})
		}
		if s.Healthcheck == nil && port != hc.port {
			t.Errorf("service %s listens on %s, the image's HEALTHCHECK asks %s", name, port, hc.port)
		}
		if s.StopGracePeriod == "" {
			t.Errorf("service %s has no stop_grace_period: compose's default is 10s", name)
		} else {
			g, err := time.ParseDuration(s.StopGracePeriod)
			if err != nil {
				t.Fatalf("service %s stop_grace_period: %v", name, err)
			}
			timeout, bound := shutdownTimeout(t, rest, s.Environment), shutdownBound(t)
			if g <= timeout+bound {
				t.Errorf("service %s stop_grace_period %v, but the relay may take %v + %v to exit", name, g, timeout, bound)
			}
		}
	}
	if runners != 3 {
		t.Errorf("compose.yaml runs %d relays, want 3", runners)
	}
}

func dockerfileEnv(t *testing.T) map[string]string {
	t.Helper()
	d, err := parseDockerfile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	return d.finalStage().env
}

// TestComposePrometheusScrapesTheRelays: prometheus.yml, as mounted,
// scrapes every relay once, on the port its metrics listener uses.
func TestComposePrometheusScrapesTheRelays(t *testing.T) {
	f := loadCompose(t)
	prom, ok := f.Services["prometheus"]
	if !ok {
		t.Fatal("compose.yaml has no prometheus service")
	}
	host, ok := prom.mount("/etc/prometheus/prometheus.yml")
	if !ok {
		t.Fatal("the prometheus service mounts no /etc/prometheus/prometheus.yml")
	}
	raw, err := os.ReadFile(filepath.Join(composeDir, host))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			MetricsPath   string `yaml:"metrics_path"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatalf("%s: %v", host, err)
	}
	want := map[string]string{} // service -> host:port
	for name, s := range f.relayServices(t) {
		if len(s.Command) > 0 && s.Command[0] == "run" {
			port := metricsPort(t, name, s.Command[1:], s.Environment)
			if port == "" {
				port = metricsPort(t, "the image", nil, dockerfileEnv(t))
			}
			want[name] = net.JoinHostPort(name, port)
		}
	}
	seen := map[string]int{}
	for _, sc := range cfg.ScrapeConfigs {
		if sc.MetricsPath != "" && sc.MetricsPath != "/metrics" {
			t.Errorf("job %s scrapes %s, the relays serve /metrics", sc.JobName, sc.MetricsPath)
		}
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				seen[target]++
			}
		}
	}
	for name, target := range want {
		if seen[target] != 1 {
			t.Errorf("prometheus.yml scrapes %s %d times, want once (relay %s)", target, seen[target], name)
		}
	}
	for target := range seen {
		found := false
		for _, w := range want {
			found = found || w == target
		}
		if !found {
			t.Errorf("prometheus.yml scrapes %s, which is no relay's metrics listener", target)
		}
	}
}

// TestComposeGrafanaProvisioning: Grafana loads the dashboard from where
// compose mounts it and queries the provisioned datasource, which is the
// compose Prometheus.
func TestComposeGrafanaProvisioning(t *testing.T) {
	f := loadCompose(t)
	g, ok := f.Services["grafana"]
	if !ok {
		t.Fatal("compose.yaml has no grafana service")
	}
	prov, ok := g.mount("/etc/grafana/provisioning")
	if !ok {
		t.Fatal("grafana mounts nothing at /etc/grafana/provisioning")
	}
	var ds struct {
		Datasources []struct {
			UID, Type, URL string
		} `yaml:"datasources"`
	}
	readYAML(t, filepath.Join(composeDir, prov, "datasources", "prometheus.yaml"), &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" {
		t.Fatalf("datasources %+v, want one prometheus", ds.Datasources)
	}
	if want := "http://prometheus:9090"; ds.Datasources[0].URL != want {
		t.Errorf("datasource url %s, want %s (the compose service)", ds.Datasources[0].URL, want)
	}
	var providers struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, filepath.Join(composeDir, prov, "dashboards", "outbox-relay.yaml"), &providers)
	if len(providers.Providers) != 1 {
		t.Fatalf("%d dashboard providers, want 1", len(providers.Providers))
	}
	dashDir, ok := g.mount(providers.Providers[0].Options.Path)
	if !ok {
		t.Fatalf("the dashboard provider reads %s, which grafana's volumes do not mount", providers.Providers[0].Options.Path)
	}
	if home := g.Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]; home != "" {
		rel, err := filepath.Rel(providers.Providers[0].Options.Path, home)
		if err != nil || strings.HasPrefix(rel, "..") {
			t.Errorf("home dashboard %s is outside %s", home, providers.Providers[0].Options.Path)
		} else if _, err := os.Stat(filepath.Join(composeDir, dashDir, rel)); err != nil {
			t.Errorf("home dashboard: %v", err)
		}
	}
	d := loadDashboard(t, filepath.Join(composeDir, dashDir, "outbox-relay.json"))
	for _, p := range d.panels() {
		uids := []string{p.Datasource.UID}
		for _, q := range p.Targets {
			uids = append(uids, q.Datasource.UID)
		}
		for _, uid := range uids {
			if uid != ds.Datasources[0].UID {
				t.Errorf("panel %q queries datasource %q, the provisioned one is %q", p.Title, uid, ds.Datasources[0].UID)
			}
		}
	}
}

func readYAML(t *testing.T, file string, v any) {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
