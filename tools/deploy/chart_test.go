package deploy

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// repo is the repository's root, from tools/deploy.
const repo = "../.."

var chartDir = filepath.Join(repo, "deploy", "helm", "pulse")

// helm is the pinned Helm `make test-deploy` builds; PULSE_HELM overrides it.
func helm(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PULSE_HELM"); p != "" {
		return p
	}
	p, err := filepath.Abs(filepath.Join(repo, "bin", "tools", "helm"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("no helm at %s: `make test-deploy` builds it from tools/deploy/go.mod (or set PULSE_HELM)", p)
	}
	return p
}

// manifest is one rendered object: its kind and the typed value it decoded into.
type manifest struct {
	kind, name string
	obj        any
	source     string
}

// render runs `helm template` with args and decodes every document strictly: a field
// the Kubernetes type does not have, or a duplicate key, fails the test.
func render(t *testing.T, args ...string) []manifest {
	t.Helper()
	cmd := exec.Command(helm(t), append([]string{"template", "pulse", chartDir, "--namespace", "presence"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template %v: %v\n%s", args, err, stderr.String())
	}
	var ms []manifest
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(out), -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("a rendered document is not YAML: %v\n%s", err, doc)
		}
		var obj any
		switch head.APIVersion + " " + head.Kind {
		case "apps/v1 Deployment":
			obj = &appsv1.Deployment{}
		case "v1 Service":
			obj = &corev1.Service{}
		case "v1 Secret":
			obj = &corev1.Secret{}
		case "policy/v1 PodDisruptionBudget":
			obj = &policyv1.PodDisruptionBudget{}
		case "autoscaling/v2 HorizontalPodAutoscaler":
			obj = &autoscalingv2.HorizontalPodAutoscaler{}
		case "batch/v1 Job":
			obj = &batchv1.Job{}
		case "monitoring.coreos.com/v1 ServiceMonitor":
			obj = &monitoringv1.ServiceMonitor{}
		default:
			t.Fatalf("%s %s %q: a kind this check does not know; add its Go type", head.APIVersion, head.Kind, head.Metadata.Name)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Errorf("%s %q does not match the API's schema: %v", head.Kind, head.Metadata.Name, err)
			continue
		}
		ms = append(ms, manifest{kind: head.Kind, name: head.Metadata.Name, obj: obj, source: doc})
	}
	return ms
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// The values the chart is checked with: its defaults, the production-like example, and
// corners of the templates (auth off, no hooks or autoscaling, mutual TLS, static members).
var valueSets = map[string][]string{
	"defaults":   nil,
	"production": {"-f", filepath.Join(chartDir, "ci", "production-values.yaml")},
	"corners": {
		"--set", "auth.enabled=false", "--set", "hooks.topics.enabled=false", "--set", "hooks.migrate.enabled=false",
		"--set", "ingest.autoscaling.enabled=false", "--set", "query.autoscaling.enabled=false",
		"--set", "aggregator.pdb.enabled=false", "--set", "aggregator.staticMembership=true",
		"--set", "tls.existingSecret=edge-tls", "--set", "tls.clientCASecret.name=edge-client-ca",
		"--set", "kafka.tls.clientCertSecret.name=pulse-user", "--set", "serviceMonitor.enabled=true",
		"--set", "image.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		"--set-string", "ingest.env.PULSE_INGEST_MAX_SKEW=2m",
	},
	// Without the admin listener: /metrics on the service ports, as before it existed.
	"noadmin": {"--set", "admin.enabled=false", "--set", "serviceMonitor.enabled=true"},
	// The notifier's endpoints given inline, in a Secret the chart makes.
	"webhooks": {"--set-json", `notifier.endpointsJSON="{\"endpoints\": [{\"id\": \"crm\", \"url\": \"https://crm.example.com/hook\"}]}"`},
	// Without the notifier.
	"nonotifier": {"--set", "notifier.enabled=false", "--set", "serviceMonitor.enabled=true"},
}

// components are the Deployments a value set renders.
func components(valueSet string) int {
	if valueSet == "nonotifier" {
		return 4
	}
	return 5
}

// adminEnabled reports whether a value set keeps the chart's admin listener.
func adminEnabled(valueSet string) bool { return valueSet != "noadmin" }

func TestRenderedManifestsDecodeIntoTheAPITypes(t *testing.T) {
	for name, args := range valueSets {
		t.Run(name, func(t *testing.T) {
			ms := render(t, args...)
			count := map[string]int{}
			for _, m := range ms {
				count[m.kind]++
			}
			deployments, services := components(name), components(name)
			if adminEnabled(name) {
				services *= 2 // each component's public Service and its admin Service
			}
			if count["Deployment"] != deployments || count["Service"] != services {
				t.Errorf("rendered %v: want %d Deployments and %d Services", count, deployments, services)
			}
			switch name {
			case "defaults":
				want := map[string]int{"Deployment": 5, "Service": 10, "PodDisruptionBudget": 5, "HorizontalPodAutoscaler": 2, "Job": 2, "Secret": 1}
				if fmt.Sprint(count) != fmt.Sprint(want) {
					t.Errorf("rendered %v, want %v", count, want)
				}
			case "webhooks":
				if count["Secret"] != 2 {
					t.Errorf("rendered %v with notifier.endpointsJSON, want its Secret beside query's", count)
				}
			case "nonotifier":
				if count["PodDisruptionBudget"] != 4 {
					t.Errorf("rendered %v without the notifier, want no budget for it", count)
				}
			case "production":
				if count["ServiceMonitor"] != 1 {
					t.Errorf("rendered %d ServiceMonitors with TLS on the edges, want 1 (the admin listeners speak plain HTTP)", count["ServiceMonitor"])
				}
			case "corners":
				if count["Job"] != 0 || count["HorizontalPodAutoscaler"] != 0 || count["PodDisruptionBudget"] != 4 {
					t.Errorf("rendered %v with hooks, autoscaling and the aggregator's budget off", count)
				}
			}
		})
	}
}

// ports reads internal/platform/ports' constants, so the chart's ports cannot drift from the code's.
func ports(t *testing.T) map[string]int32 {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repo, "internal", "platform", "ports", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int32{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok || len(vs.Values) != len(vs.Names) {
				return true
			}
			for i, id := range vs.Names {
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.INT {
					v, _ := strconv.Atoi(lit.Value)
					got[strings.ToLower(id.Name)] = int32(v)
				}
			}
			return true
		})
	}
	return got
}

// documentedVariables are the PULSE_* names docs/configuration.md documents: the
// services' tables are generated from the code, so a name missing there is one no
// service reads.
func documentedVariables(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]bool{}
	for _, m := range regexp.MustCompile("`(PULSE_[A-Z0-9_]+)`").FindAllStringSubmatch(string(b), -1) {
		vars[m[1]] = true
	}
	return vars
}

func TestChartWiring(t *testing.T) {
	want := ports(t)
	documented := documentedVariables(t)
	for name, args := range valueSets {
		t.Run(name, func(t *testing.T) {
			ms := render(t, args...)
			services := map[string]*corev1.Service{}
			deployments := map[string]*appsv1.Deployment{}
			for _, m := range ms {
				switch o := m.obj.(type) {
				case *corev1.Service:
					services[o.Name] = o
				case *appsv1.Deployment:
					deployments[o.Name] = o
				}
			}
			for _, m := range ms {
				switch o := m.obj.(type) {
				case *appsv1.Deployment:
					checkDeployment(t, o, want, documented, name == "corners", adminEnabled(name))
				case *batchv1.Job:
					checkJob(t, o, documented)
				case *corev1.Service:
					d := deployments[strings.TrimSuffix(o.Name, "-admin")]
					if d == nil {
						t.Errorf("Service %s has no Deployment of its name", o.Name)
						continue
					}
					checkServicePorts(t, o)
					for k, v := range o.Spec.Selector {
						if d.Spec.Template.Labels[k] != v {
							t.Errorf("Service %s selects %s=%s, which its pods do not carry", o.Name, k, v)
						}
					}
				case *policyv1.PodDisruptionBudget:
					d := deployments[o.Name]
					if d == nil {
						t.Errorf("PodDisruptionBudget %s has no Deployment of its name", o.Name)
						continue
					}
					for k, v := range o.Spec.Selector.MatchLabels {
						if d.Spec.Template.Labels[k] != v {
							t.Errorf("PodDisruptionBudget %s selects %s=%s, which its pods do not carry", o.Name, k, v)
						}
					}
				case *autoscalingv2.HorizontalPodAutoscaler:
					d := deployments[o.Spec.ScaleTargetRef.Name]
					if d == nil || o.Spec.ScaleTargetRef.Kind != "Deployment" {
						t.Errorf("HorizontalPodAutoscaler %s scales %s %s, not one of the chart's Deployments", o.Name, o.Spec.ScaleTargetRef.Kind, o.Spec.ScaleTargetRef.Name)
					} else if d.Spec.Replicas != nil {
						t.Errorf("Deployment %s sets replicas although %s scales it: every upgrade would reset the count", d.Name, o.Name)
					}
					if c := d.Spec.Template.Spec.Containers[0].Name; c != "ingest" && c != "query" {
						t.Errorf("HorizontalPodAutoscaler %s scales %s; only the HTTP edges scale on CPU", o.Name, c)
					}
				case *monitoringv1.ServiceMonitor:
					if o.Spec.JobLabel != "app.kubernetes.io/component" {
						t.Errorf("ServiceMonitor %s: jobLabel %q; deploy/observability selects job=\"<component>\"", o.Name, o.Spec.JobLabel)
					}
					port := "http"
					if adminEnabled(name) {
						port = "admin"
					}
					for _, ep := range o.Spec.Endpoints {
						if ep.Port != port || ep.Path != "/metrics" {
							t.Errorf("ServiceMonitor %s scrapes port %q path %q, want %s /metrics", o.Name, ep.Port, ep.Path, port)
						}
						if port == "admin" && ep.Scheme != "http" {
							t.Errorf("ServiceMonitor %s scrapes the admin port with scheme %q; it speaks plain HTTP", o.Name, ep.Scheme)
						}
					}
				}
			}
		})
	}
}

// The variables the values set, per value set and component: name to value, "" for
// one that must be absent, "<ref>" for one taken from a Secret or the pod.
var wantEnv = map[string]map[string]map[string]string{
	"defaults": {
		"ingest":     {"PULSE_AUTH": "", "PULSE_API_KEYS_FILE": "", "PULSE_KAFKA_BROKERS": "pulse-kafka-kafka-bootstrap:9092"},
		"aggregator": {"PULSE_AGGREGATOR_INSTANCE_ID": "", "PULSE_REDIS_ADDR": "pulse-redis-leader:6379"},
		"history":    {"PULSE_INGEST_MAX_SKEW": "", "PULSE_CASSANDRA_HOSTS": "pulse-dc1-service"},
		"notifier": {
			"PULSE_TOPIC_WEBHOOKS": "presence.webhooks", "PULSE_TOPIC_CHANGES": "presence.changes", "PULSE_NOTIFIER_ENDPOINTS_FILE": "",
			"PULSE_HTTP_ADDR": ":18084", "PULSE_REDIS_ADDR": "", "PULSE_CASSANDRA_HOSTS": "", "PULSE_AUTH": "", "PULSE_API_KEYS_FILE": "",
		},
	},
	"production": {
		"ingest": {
			"PULSE_API_KEYS_FILE": "/etc/pulse/auth/api-keys/api-keys", "PULSE_TLS_CERT_FILE": "/etc/pulse/tls/server/tls.crt",
			"PULSE_KAFKA_SASL_PASSWORD_FILE": "/etc/pulse/kafka/password/password", "PULSE_INGEST_USER_RATE": "100",
			"PULSE_SHUTDOWN_TIMEOUT": "15s", "PULSE_REDIS_ADDR": "",
		},
		"query": {
			"PULSE_REDIS_PASSWORD_FILE": "/etc/pulse/redis/password/password", "PULSE_CASSANDRA_USERNAME": "pulse",
			"PULSE_QUERY_PEER_METRICS": "ingest=http://pulse-ingest-admin:18090/metrics,aggregator=http://pulse-aggregator-admin:18090/metrics,history=http://pulse-history-admin:18090/metrics,notifier=http://pulse-notifier-admin:18090/metrics",
			"PULSE_ADMIN_ADDR":         ":18090",
		},
		"notifier": {
			"PULSE_NOTIFIER_ENDPOINTS_FILE": "/etc/pulse/notifier/endpoints/endpoints.json", "PULSE_KAFKA_SASL_PASSWORD_FILE": "/etc/pulse/kafka/password/password",
			"PULSE_TLS_CERT_FILE": "",
		},
		"history": {"PULSE_INGEST_MAX_SKEW": "5m", "PULSE_HISTORY_BATCH_PARTITIONS": "1", "PULSE_REDIS_ADDR": "", "PULSE_API_KEYS_FILE": ""},
	},
	"corners": {
		"ingest":     {"PULSE_AUTH": "off", "PULSE_TLS_CLIENT_CA_FILE": "/etc/pulse/tls/client-ca/ca.crt", "PULSE_KAFKA_TLS": "true"},
		"query":      {"PULSE_AUTH": "off"},
		"aggregator": {"PULSE_AGGREGATOR_INSTANCE_ID": "<ref>", "PULSE_AUTH": ""},
		"history":    {"PULSE_INGEST_MAX_SKEW": "2m", "PULSE_KAFKA_TLS_CERT_FILE": "/etc/pulse/kafka/client/user.crt"},
	},
	"noadmin": {
		"ingest": {"PULSE_ADMIN_ADDR": ""},
		"query":  {"PULSE_ADMIN_ADDR": "", "PULSE_QUERY_PEER_METRICS": "ingest=http://pulse-ingest:18080/metrics,aggregator=http://pulse-aggregator:18082/metrics,history=http://pulse-history:18083/metrics,notifier=http://pulse-notifier:18084/metrics"},
	},
	"webhooks": {
		"notifier": {"PULSE_NOTIFIER_ENDPOINTS_FILE": "/etc/pulse/notifier/endpoints/endpoints.json"},
	},
	"nonotifier": {
		"query": {"PULSE_QUERY_PEER_METRICS": "ingest=http://pulse-ingest-admin:18090/metrics,aggregator=http://pulse-aggregator-admin:18090/metrics,history=http://pulse-history-admin:18090/metrics"},
	},
}

func TestValuesReachTheServices(t *testing.T) {
	for name, args := range valueSets {
		t.Run(name, func(t *testing.T) {
			for _, m := range render(t, args...) {
				d, ok := m.obj.(*appsv1.Deployment)
				if !ok {
					continue
				}
				c := d.Spec.Template.Spec.Containers[0]
				got := map[string]string{}
				for _, e := range c.Env {
					got[e.Name] = e.Value
					if e.ValueFrom != nil {
						got[e.Name] = "<ref>"
					}
				}
				for k, want := range wantEnv[name][c.Name] {
					if got[k] != want {
						t.Errorf("%s: %s=%q, want %q", c.Name, k, got[k], want)
					}
				}
			}
		})
	}
}

// Every query replica signs cursors with one secret: by default one the chart makes
// (48 random characters under key cursor), else the Secret named, with the previous
// secret's key during a rotation.
func TestQueryCursorSecret(t *testing.T) {
	refs := func(ms []manifest) map[string]string {
		out := map[string]string{}
		for _, m := range ms {
			d, ok := m.obj.(*appsv1.Deployment)
			if !ok || d.Spec.Template.Labels["app.kubernetes.io/component"] != "query" {
				continue
			}
			for _, e := range d.Spec.Template.Spec.Containers[0].Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && strings.HasPrefix(e.Name, "PULSE_CURSOR_SECRET") {
					out[e.Name] = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
				}
			}
		}
		return out
	}
	ms := render(t)
	var made *corev1.Secret
	for _, m := range ms {
		if s, ok := m.obj.(*corev1.Secret); ok {
			made = s
		}
	}
	if made == nil || made.Name != "pulse-query-cursor" || len(made.Data["cursor"]) != 48 {
		t.Fatalf("defaults: the chart's cursor Secret is %+v, want pulse-query-cursor with 48 bytes under cursor", made)
	}
	if got := refs(ms); fmt.Sprint(got) != fmt.Sprint(map[string]string{"PULSE_CURSOR_SECRET": "pulse-query-cursor/cursor"}) {
		t.Errorf("defaults: query's cursor secrets %v", got)
	}
	ms = render(t, "--set", "query.cursorSecret.name=mine", "--set", "query.cursorSecret.key=new", "--set", "query.cursorSecret.previousKey=old")
	for _, m := range ms {
		if m.kind == "Secret" {
			t.Errorf("with a Secret named, the chart still makes %s", m.name)
		}
	}
	want := map[string]string{"PULSE_CURSOR_SECRET": "mine/new", "PULSE_CURSOR_SECRET_PREVIOUS": "mine/old"}
	if got := refs(ms); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("a rotation: query's cursor secrets %v, want %v", got, want)
	}
}

// The notifier reads its endpoints (URLs and signing secrets) from a file in a Secret:
// the one named, or the one the chart makes from notifier.endpointsJSON, never both;
// the JSON given inline must parse. The topics hook creates the webhooks topic and its
// dead letters only with the notifier.
func TestNotifierEndpoints(t *testing.T) {
	const inline = `{"endpoints": [{"id": "crm", "url": "https://crm.example.com/hook", "secret": "s"}]}`
	find := func(ms []manifest) (secret *corev1.Secret, notifier *appsv1.Deployment, topics string) {
		for _, m := range ms {
			switch o := m.obj.(type) {
			case *corev1.Secret:
				if o.Name == "pulse-notifier-endpoints" {
					secret = o
				}
			case *appsv1.Deployment:
				if o.Name == "pulse-notifier" {
					notifier = o
				}
			case *batchv1.Job:
				if o.Name == "pulse-topics" {
					for _, a := range o.Spec.Template.Spec.Containers[0].Args {
						if v, ok := strings.CutPrefix(a, "-topics="); ok {
							topics = v
						}
					}
				}
			}
		}
		return
	}
	// mounted is the Secret and key PULSE_NOTIFIER_ENDPOINTS_FILE names, by way of its volume.
	mounted := func(d *appsv1.Deployment) string {
		c := d.Spec.Template.Spec.Containers[0]
		file := envMap(c)["PULSE_NOTIFIER_ENDPOINTS_FILE"]
		for _, vm := range c.VolumeMounts {
			if vm.MountPath != filepath.Dir(file) {
				continue
			}
			for _, v := range d.Spec.Template.Spec.Volumes {
				if v.Name == vm.Name && v.Secret != nil {
					return v.Secret.SecretName + "/" + filepath.Base(file)
				}
			}
		}
		return ""
	}

	secret, d, topics := find(render(t, "--set-json", "notifier.endpointsJSON="+strconv.Quote(inline)))
	if secret == nil || string(secret.Data["endpoints.json"]) != inline {
		t.Fatalf("with notifier.endpointsJSON: Secret %+v, want pulse-notifier-endpoints holding the JSON under endpoints.json", secret)
	}
	if d == nil || mounted(d) != "pulse-notifier-endpoints/endpoints.json" {
		t.Errorf("with notifier.endpointsJSON the notifier reads %q", mounted(d))
	}
	if want := "presence.events,presence.changes,presence.webhooks,presence.events.dlq,presence.changes.dlq,presence.webhooks.dlq"; topics != want {
		t.Errorf("the topics hook creates %q, want %q", topics, want)
	}

	secret, d, _ = find(render(t, "--set", "notifier.endpointsSecret.name=hooks", "--set", "notifier.endpointsSecret.key=e.json"))
	if secret != nil || d == nil || mounted(d) != "hooks/e.json" {
		t.Errorf("with notifier.endpointsSecret: the chart's Secret %v, the notifier reads %q, want hooks/e.json", secret, mounted(d))
	}

	secret, d, _ = find(render(t))
	if secret != nil || d == nil || envMap(d.Spec.Template.Spec.Containers[0])["PULSE_NOTIFIER_ENDPOINTS_FILE"] != "" {
		t.Errorf("with no endpoints: the chart's Secret %v, the notifier %v", secret, d)
	}

	_, d, topics = find(render(t, "--set", "notifier.enabled=false"))
	if d != nil || topics != "presence.events,presence.changes,presence.events.dlq,presence.changes.dlq" {
		t.Errorf("without the notifier: Deployment %v, topics %q", d, topics)
	}

	for _, c := range []struct{ args []string }{
		{[]string{"--set", "notifier.endpointsSecret.name=hooks", "--set-json", `notifier.endpointsJSON="[]"`}},
		{[]string{"--set-json", `notifier.endpointsJSON="{\"endpoints\": ["`}},
		{[]string{"--set-json", `notifier.endpointsJSON="[1], \"x\": 2"`}},
	} {
		out, err := exec.Command(helm(t), append([]string{"template", "pulse", chartDir}, c.args...)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "notifier.endpoints") {
			t.Errorf("helm template %v: %v, want a refusal naming the value\n%.300s", c.args, err, out)
		}
	}
}

// values.schema.json refuses a misspelt key and a variable that is not Pulse's, instead
// of rendering without them.
func TestValuesSchemaRefusesMistakes(t *testing.T) {
	for _, set := range []string{"ingest.replica=3", "kafka.sasl.passwordSecret.nme=x", "env.LOG_LEVEL=debug", "cassandra.consistency=MOST",
		"notifier.endpointSecret.name=x", "notifier.endpointsJSON.endpoints=x"} {
		cmd := exec.Command(helm(t), "template", "pulse", chartDir, "--set", set)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "schema") {
			t.Errorf("helm template --set %s: %v, want the values schema to refuse it\n%s", set, err, out)
		}
	}
}

func checkDeployment(t *testing.T, d *appsv1.Deployment, ports map[string]int32, documented map[string]bool, mtls, admin bool) {
	t.Helper()
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("Deployment %s has %d containers, want 1", d.Name, len(spec.Containers))
	}
	c := spec.Containers[0]
	component := d.Spec.Template.Labels["app.kubernetes.io/component"]
	if c.Name != component || len(c.Command) != 1 || c.Command[0] != "/usr/local/bin/"+component {
		t.Errorf("Deployment %s runs %v in container %s; want the image's /usr/local/bin/%s", d.Name, c.Command, c.Name, component)
	}
	wantPorts := 1
	if admin {
		wantPorts = 2
	}
	if len(c.Ports) != wantPorts || c.Ports[0].Name != "http" || c.Ports[0].ContainerPort != ports[component] {
		t.Errorf("Deployment %s: ports %+v, want http on %d (internal/platform/ports)", d.Name, c.Ports, ports[component])
	}
	if admin {
		checkAdminPort(t, d, c)
	}
	edge := component == "ingest" || component == "query"
	for probe, p := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		switch {
		case p == nil:
			t.Errorf("Deployment %s has no probe on %s", d.Name, probe)
		case mtls && edge:
			if p.TCPSocket == nil || p.TCPSocket.Port.String() != "http" {
				t.Errorf("Deployment %s under mutual TLS: want a TCP probe of port http, got %+v", d.Name, p.ProbeHandler)
			}
		case p.HTTPGet == nil || p.HTTPGet.Path != probe || p.HTTPGet.Port.String() != "http":
			t.Errorf("Deployment %s: want an HTTP probe of %s on port http, got %+v", d.Name, probe, p.ProbeHandler)
		}
	}
	sc, psc := c.SecurityContext, spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || sc == nil || sc.ReadOnlyRootFilesystem == nil ||
		!*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("Deployment %s: want a non-root pod with a read-only root file system and no privilege escalation", d.Name)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("Deployment %s: want CPU requests and a memory limit", d.Name)
	}
	checkEnv(t, "Deployment "+d.Name, c, spec.Volumes, documented)
	env := envMap(c)
	if env["PULSE_HTTP_ADDR"] != fmt.Sprintf(":%d", ports[component]) {
		t.Errorf("Deployment %s: PULSE_HTTP_ADDR=%q, want :%d", d.Name, env["PULSE_HTTP_ADDR"], ports[component])
	}
}

// checkAdminPort: the pod declares the admin port PULSE_ADMIN_ADDR listens on, and its
// scrape annotations point at it.
func checkAdminPort(t *testing.T, d *appsv1.Deployment, c corev1.Container) {
	t.Helper()
	if len(c.Ports) < 2 || c.Ports[1].Name != "admin" {
		t.Errorf("Deployment %s: ports %+v, want a second one named admin", d.Name, c.Ports)
		return
	}
	port := c.Ports[1].ContainerPort
	if got := envMap(c)["PULSE_ADMIN_ADDR"]; got != fmt.Sprintf(":%d", port) {
		t.Errorf("Deployment %s: PULSE_ADMIN_ADDR=%q, want :%d (its admin port)", d.Name, got, port)
	}
	a := d.Spec.Template.Annotations
	if a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != strconv.Itoa(int(port)) || a["prometheus.io/path"] != "/metrics" {
		t.Errorf("Deployment %s: scrape annotations %v, want /metrics on the admin port %d", d.Name, a, port)
	}
}

// checkServicePorts: a component's public Service carries only its service port, and
// its admin Service only the admin port, as a ClusterIP: the admin port answers
// /metrics and profiles without credentials.
func checkServicePorts(t *testing.T, s *corev1.Service) {
	t.Helper()
	want := "http"
	if strings.HasSuffix(s.Name, "-admin") {
		want = "admin"
		if s.Spec.Type != corev1.ServiceTypeClusterIP {
			t.Errorf("Service %s is a %s; an admin Service must stay ClusterIP", s.Name, s.Spec.Type)
		}
	}
	for _, p := range s.Spec.Ports {
		if p.Name != want || p.TargetPort.String() != want {
			t.Errorf("Service %s exposes port %s (target %s), want only %s", s.Name, p.Name, p.TargetPort.String(), want)
		}
	}
}

func checkJob(t *testing.T, j *batchv1.Job, documented map[string]bool) {
	t.Helper()
	if hook := j.Annotations["helm.sh/hook"]; hook != "pre-install,pre-upgrade" {
		t.Errorf("Job %s: helm.sh/hook %q, want pre-install,pre-upgrade", j.Name, hook)
	}
	c := j.Spec.Template.Spec.Containers[0]
	if len(c.Command) != 2 || c.Command[0] != "/usr/local/bin/pulsectl" || !slices.Contains([]string{"topics", "migrate"}, c.Command[1]) {
		t.Errorf("Job %s runs %v, want pulsectl topics or migrate", j.Name, c.Command)
	}
	checkEnv(t, "Job "+j.Name, c, j.Spec.Template.Spec.Volumes, documented)
}

func envMap(c corev1.Container) map[string]string {
	m := map[string]string{}
	for _, e := range c.Env {
		m[e.Name] = e.Value
	}
	return m
}

// checkEnv: every variable is one docs/configuration.md documents, named once, and every *_FILE path
// lies in a directory a Secret volume is mounted on.
func checkEnv(t *testing.T, what string, c corev1.Container, volumes []corev1.Volume, documented map[string]bool) {
	t.Helper()
	secretDirs := map[string]bool{}
	for _, vm := range c.VolumeMounts {
		for _, v := range volumes {
			if v.Name == vm.Name && v.Secret != nil {
				secretDirs[vm.MountPath] = true
			}
		}
	}
	seen := map[string]bool{}
	for _, e := range c.Env {
		if seen[e.Name] {
			t.Errorf("%s sets %s twice", what, e.Name)
		}
		seen[e.Name] = true
		if !documented[e.Name] {
			t.Errorf("%s sets %s, which docs/configuration.md's tables do not document: no service reads it", what, e.Name)
		}
		if strings.HasSuffix(e.Name, "_FILE") && !secretDirs[filepath.Dir(e.Value)] {
			t.Errorf("%s: %s=%s is not in a mounted Secret", what, e.Name, e.Value)
		}
	}
	for _, vm := range c.VolumeMounts {
		if vm.MountPath == "/tmp" {
			continue
		}
		if !vm.ReadOnly {
			t.Errorf("%s mounts %s writable", what, vm.MountPath)
		}
	}
}
