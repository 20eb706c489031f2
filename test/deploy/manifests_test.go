// Package deploy checks the Kubernetes manifests under deploy/kubernetes:
// each document decodes strictly (an unknown or misspelled field fails)
// into its Kubernetes API type, and what they say of each other holds (the
// Service selects the DaemonSet's pods, every ConfigMap and Secret key the
// pods read exists, every setting is one spaced knows). No cluster is
// applied to here: there is no Kubernetes on these machines.
package deploy

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/config"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

type manifests struct {
	statefulSets []appsv1.StatefulSet
	deployments  []appsv1.Deployment
	claims       []corev1.PersistentVolumeClaim
	namespaces   []corev1.Namespace
	configMaps   []corev1.ConfigMap
	secrets      []corev1.Secret
	services     []corev1.Service
	daemonSets   []appsv1.DaemonSet
}

func load(t *testing.T, glob string) *manifests {
	t.Helper()
	files, err := filepath.Glob(glob)
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	m := &manifests{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range bytes.Split(data, []byte("\n---\n")) {
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := yaml.Unmarshal(doc, &head); err != nil {
				t.Fatalf("%s #%d: %v", f, i, err)
			}
			into := map[string]func() any{
				"v1/Namespace": func() any {
					m.namespaces = append(m.namespaces, corev1.Namespace{})
					return &m.namespaces[len(m.namespaces)-1]
				},
				"v1/ConfigMap": func() any {
					m.configMaps = append(m.configMaps, corev1.ConfigMap{})
					return &m.configMaps[len(m.configMaps)-1]
				},
				"v1/Secret":  func() any { m.secrets = append(m.secrets, corev1.Secret{}); return &m.secrets[len(m.secrets)-1] },
				"v1/Service": func() any { m.services = append(m.services, corev1.Service{}); return &m.services[len(m.services)-1] },
				"v1/PersistentVolumeClaim": func() any {
					m.claims = append(m.claims, corev1.PersistentVolumeClaim{})
					return &m.claims[len(m.claims)-1]
				},
				"apps/v1/StatefulSet": func() any {
					m.statefulSets = append(m.statefulSets, appsv1.StatefulSet{})
					return &m.statefulSets[len(m.statefulSets)-1]
				},
				"apps/v1/Deployment": func() any {
					m.deployments = append(m.deployments, appsv1.Deployment{})
					return &m.deployments[len(m.deployments)-1]
				},
				"apps/v1/DaemonSet": func() any {
					m.daemonSets = append(m.daemonSets, appsv1.DaemonSet{})
					return &m.daemonSets[len(m.daemonSets)-1]
				},
			}[head.APIVersion+"/"+head.Kind]
			if into == nil {
				t.Fatalf("%s #%d: %s %s is not a kind this test knows", f, i, head.APIVersion, head.Kind)
			}
			if err := yaml.UnmarshalStrict(doc, into()); err != nil {
				t.Errorf("%s #%d (%s): %v", f, i, head.Kind, err)
			}
		}
	}
	return m
}

// knownSettings are the SPACE_* variables spaced reads (from its config).
func knownSettings(t *testing.T) []string {
	out := config.Variables()
	if len(out) < 20 {
		t.Fatalf("config.Variables() lists only %d variables", len(out))
	}
	return out
}

func TestManifests(t *testing.T) {
	m := load(t, "../../deploy/kubernetes/*.yaml")
	if len(m.daemonSets) != 1 || len(m.services) != 1 || len(m.configMaps) != 1 || len(m.secrets) != 1 || len(m.namespaces) != 1 {
		t.Fatalf("want one each of DaemonSet, Service, ConfigMap, Secret, Namespace; have %d %d %d %d %d",
			len(m.daemonSets), len(m.services), len(m.configMaps), len(m.secrets), len(m.namespaces))
	}
	ds, svc, cm, sec := m.daemonSets[0], m.services[0], m.configMaps[0], m.secrets[0]
	ns := m.namespaces[0].Name
	for what, got := range map[string]string{"DaemonSet": ds.Namespace, "Service": svc.Namespace, "ConfigMap": cm.Namespace, "Secret": sec.Namespace} {
		if got != ns {
			t.Errorf("%s is in namespace %q, not %q", what, got, ns)
		}
	}

	pod := ds.Spec.Template
	if !labels.SelectorFromSet(ds.Spec.Selector.MatchLabels).Matches(labels.Set(pod.Labels)) {
		t.Error("the DaemonSet's selector does not select its own pods")
	}
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) {
		t.Error("the Service does not select the spaced pods")
	}
	if !pod.Spec.HostNetwork {
		t.Error("spaced needs the host network (sandbox links, the egress gateway, node addresses)")
	}

	known := knownSettings(t)
	for k := range cm.Data {
		if !slices.Contains(known, k) {
			t.Errorf("ConfigMap sets %s, which spaced does not read", k)
		}
	}
	if !strings.Contains(cm.Data["SPACE_ADDR"], "0.0.0.0:") {
		t.Errorf("SPACE_ADDR %q: the other nodes and the Service must reach the API", cm.Data["SPACE_ADDR"])
	}

	containers := append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...)
	var spaced *corev1.Container
	for i, c := range containers {
		if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
			t.Errorf("container %s is not privileged (runsc, netns, cgroups)", c.Name)
		}
		if c.Name == "spaced" {
			spaced = &containers[i]
		}
	}
	if spaced == nil {
		t.Fatal("no spaced container")
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range spaced.Env {
		env[e.Name] = e
		if strings.HasPrefix(e.Name, "SPACE_") && !slices.Contains(known, e.Name) {
			t.Errorf("env %s is not a setting spaced reads", e.Name)
		}
		if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil {
			if r.SecretKeyRef.Name != sec.Name {
				t.Errorf("env %s reads Secret %s, not %s", e.Name, r.SecretKeyRef.Name, sec.Name)
			} else if _, ok := sec.StringData[r.SecretKeyRef.Key]; !ok {
				t.Errorf("env %s reads key %s, which the example Secret lacks", e.Name, r.SecretKeyRef.Key)
			}
		}
	}
	for _, need := range []string{"SPACE_DATABASE_URL", "SPACE_NODE_ID", "SPACE_NODE_ADDRESS", "SPACE_API_KEY"} {
		if _, ok := env[need]; !ok {
			t.Errorf("the spaced container does not set %s", need)
		}
	}
	if len(spaced.EnvFrom) != 1 || spaced.EnvFrom[0].ConfigMapRef == nil || spaced.EnvFrom[0].ConfigMapRef.Name != cm.Name {
		t.Errorf("spaced does not read the ConfigMap %s", cm.Name)
	}

	// Every volume mounted exists; the data dir and the key file are where
	// the ConfigMap says.
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		volumes[v.Name] = v
	}
	mounted := map[string]bool{}
	for _, c := range containers {
		for _, vm := range c.VolumeMounts {
			if _, ok := volumes[vm.Name]; !ok {
				t.Errorf("container %s mounts volume %s, which the pod lacks", c.Name, vm.Name)
			}
			if c.Name == "spaced" {
				mounted[vm.MountPath] = true
			}
		}
	}
	for _, path := range []string{cm.Data["SPACE_DATA_DIR"], cm.Data["SPACE_TEMPLATES_DIR"], filepath.Dir(cm.Data["SPACE_PLATFORM_KEY_FILE"]), filepath.Dir(filepath.Dir(cm.Data["SPACE_RUNSC"]))} {
		if !underAny(path, mounted) {
			t.Errorf("%s is on no volume of the spaced container (mounts: %v)", path, mounted)
		}
	}

	// The platform key comes from the Secret, read-only, where spaced
	// reads it, and 0400 or tighter (spaced refuses a key group or others
	// can read). The example Secret holds no key (a key is never in a
	// file like it; "{}" made spaced fail at start): it says how to make
	// the one every node shares.
	keyDir := filepath.Dir(cm.Data["SPACE_PLATFORM_KEY_FILE"])
	var keyVol *corev1.Volume
	for _, vm := range spaced.VolumeMounts {
		if vm.MountPath == keyDir {
			v := volumes[vm.Name]
			keyVol = &v
			if !vm.ReadOnly {
				t.Errorf("the platform key's volume %s is mounted writable", vm.Name)
			}
		}
	}
	if keyVol == nil || keyVol.Secret == nil || keyVol.Secret.SecretName != sec.Name {
		t.Fatalf("the platform key (%s) is not mounted from Secret %s: %+v", keyDir, sec.Name, keyVol)
	}
	exampleText, err := os.ReadFile("../../deploy/kubernetes/secret.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Base(cm.Data["SPACE_PLATFORM_KEY_FILE"])
	found := false
	for _, it := range keyVol.Secret.Items {
		mode := keyVol.Secret.DefaultMode
		if it.Mode != nil {
			mode = it.Mode
		}
		if mode == nil || *mode&0o077 != 0 {
			t.Errorf("Secret item %s is mounted with mode %v: spaced refuses a key group or others can read", it.Key, mode)
		}
		if it.Path == keyFile {
			found = true
		}
		if _, ok := sec.StringData[it.Key]; ok {
			t.Errorf("the example Secret holds %s: make the key with spaced keygen, never in the example", it.Key)
		}
		if !strings.Contains(string(exampleText), "spaced keygen") || !strings.Contains(string(exampleText), "--from-file="+it.Key+"=") {
			t.Errorf("the example Secret does not say how to make %s (spaced keygen, --from-file=%s=...)", it.Key, it.Key)
		}
	}
	if !found {
		t.Errorf("no item of the key's Secret volume is %s", keyFile)
	}

	// The Service's target port is the container's.
	var ports []string
	for _, p := range spaced.Ports {
		ports = append(ports, p.Name)
	}
	for _, p := range svc.Spec.Ports {
		if !slices.Contains(ports, p.TargetPort.String()) {
			t.Errorf("Service port %s targets %s; the container has %v", p.Name, p.TargetPort.String(), ports)
		}
	}
}

func underAny(path string, mounts map[string]bool) bool {
	for m := range mounts {
		if path == m || strings.HasPrefix(path, m+"/") {
			return true
		}
	}
	return false
}

// TestExamples: the example PostgreSQL and S3 decode strictly, their
// Services select their pods, and spaced's settings point at them.
func TestExamples(t *testing.T) {
	m := load(t, "../../deploy/kubernetes/examples/*.yaml")
	if len(m.statefulSets) != 1 || len(m.deployments) != 1 || len(m.services) != 2 {
		t.Fatalf("want the PostgreSQL StatefulSet, the S3 Deployment and their Services; have %d %d %d", len(m.statefulSets), len(m.deployments), len(m.services))
	}
	pods := map[string]map[string]string{
		m.statefulSets[0].Name: m.statefulSets[0].Spec.Template.Labels,
		m.deployments[0].Name:  m.deployments[0].Spec.Template.Labels,
	}
	for _, v := range m.deployments[0].Spec.Template.Spec.Volumes {
		if pvc := v.PersistentVolumeClaim; pvc != nil && (len(m.claims) != 1 || m.claims[0].Name != pvc.ClaimName) {
			t.Errorf("the S3 example claims %s, which is not defined", pvc.ClaimName)
		}
	}
	for _, svc := range m.services {
		if l, ok := pods[svc.Name]; !ok || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(l)) {
			t.Errorf("Service %s selects no example's pods", svc.Name)
		}
	}
	main := load(t, "../../deploy/kubernetes/*.yaml")
	cm, sec := main.configMaps[0], main.secrets[0]

	// The example S3 has the bucket spaced uses: versitygw's posix
	// backend serves the directories under its root as buckets, and an
	// init container makes spaced's there, on the same volume.
	bucket, ok := strings.CutPrefix(cm.Data["SPACE_OBJECT_STORE"], "s3://")
	if !ok || bucket == "" {
		t.Fatalf("SPACE_OBJECT_STORE %q is not an S3 bucket", cm.Data["SPACE_OBJECT_STORE"])
	}
	s3pod := m.deployments[0].Spec.Template.Spec
	var gw *corev1.Container
	for i, c := range s3pod.Containers {
		if at := slices.Index(c.Args, "posix"); at >= 0 && at+1 < len(c.Args) {
			gw = &s3pod.Containers[i]
		}
	}
	if gw == nil {
		t.Fatal("the S3 example runs no versitygw posix backend")
	}
	root := gw.Args[slices.Index(gw.Args, "posix")+1]
	volumeAt := func(c corev1.Container, path string) string {
		for _, vm := range c.VolumeMounts {
			if path == vm.MountPath || strings.HasPrefix(path, vm.MountPath+"/") {
				return vm.Name + strings.TrimPrefix(path, vm.MountPath)
			}
		}
		return ""
	}
	want := volumeAt(*gw, root+"/"+bucket)
	made := false
	for _, c := range s3pod.InitContainers {
		for i, arg := range c.Command {
			if i > 0 && slices.Contains(c.Command[:i], "mkdir") && want != "" && volumeAt(c, arg) == want {
				made = true
			}
		}
	}
	if !made {
		t.Errorf("no init container of the S3 example makes the bucket %s (%s/%s on volume %q)", bucket, root, bucket, want)
	}
	if !strings.Contains(cm.Data["SPACE_S3_ENDPOINT"], "//space-s3.space.svc:") {
		t.Errorf("SPACE_S3_ENDPOINT %q is not the example S3", cm.Data["SPACE_S3_ENDPOINT"])
	}
	if !strings.Contains(sec.StringData["SPACE_DATABASE_URL"], "@space-postgres.space.svc:5432/") {
		t.Errorf("the example SPACE_DATABASE_URL does not name the example PostgreSQL")
	}
}
