package vk_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// execIn runs cmd in the pod's container through CRI ExecSync and returns
// its output; a failure fails t.
func execIn(t *testing.T, p *v1.Pod, container string, cmd ...string) string {
	t.Helper()
	out, err := tryExec(p, container, cmd...)
	if err != nil {
		t.Fatalf("exec %v in %s: %v", cmd, container, err)
	}
	return out
}

func tryExec(p *v1.Pod, container string, cmd ...string) (string, error) {
	cs := containerStatus(p, container)
	if cs == nil || cs.ContainerID == "" {
		return "", fmt.Errorf("no container %s in %s", container, podSummary(p))
	}
	_, id, _ := strings.Cut(cs.ContainerID, "://")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stdout, stderr, err := cri.ExecSync(ctx, id, cmd, 15*time.Second)
	if err != nil {
		return "", fmt.Errorf("%w (stderr %q)", err, stderr)
	}
	return string(stdout), nil
}

func waitRunning(t *testing.T, ns, name string) *v1.Pod {
	t.Helper()
	var p *v1.Pod
	waitFor(t, "pod "+name+" Running and Ready", 90*time.Second, func() (bool, string) {
		p = getPod(t, ns, name)
		return p.Status.Phase == v1.PodRunning && condition(p, v1.PodReady) == v1.ConditionTrue, podSummary(p)
	})
	return p
}

func mustCreate[T any](t *testing.T, what string, _ T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("create %s: %v", what, err)
	}
}

// kubeAPIAccess is the volume the ServiceAccount admission plugin adds to a
// pod that automounts its token (envtest's API server runs without that
// plugin, so the test adds it as the plugin would), and its mount.
func kubeAPIAccess() (v1.Volume, v1.VolumeMount) {
	exp := int64(3607)
	mode := int32(0o644)
	return v1.Volume{Name: "kube-api-access-e2e", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
			DefaultMode: &mode,
			Sources: []v1.VolumeProjection{
				{ServiceAccountToken: &v1.ServiceAccountTokenProjection{ExpirationSeconds: &exp, Path: "token"}},
				{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "kube-root-ca.crt"},
					Items: []v1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
				{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{
					{Path: "namespace", FieldRef: &v1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
			},
		}}},
		v1.VolumeMount{Name: "kube-api-access-e2e", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}
}

// TestProjectedVolume runs a pod with a projected volume of every source
// kind and the kube-api-access volume; the token it gets must authenticate
// to the real API server, bound to the pod; updates of the configMap and
// the secret must reach the running container (but not its subPath mount).
func TestProjectedVolume(t *testing.T) {
	need(t)
	ns := namespace(t)
	ctx := context.Background()
	core := client.CoreV1()
	serviceAccount(t, ns, "robot")
	cm, err := core.ConfigMaps(ns).Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"}, Data: map[string]string{"a": "one"}}, metav1.CreateOptions{})
	mustCreate(t, "configMap", cm, err)
	sec, err := core.Secrets(ns).Create(ctx, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sec"}, Data: map[string][]byte{"pw": []byte("s3cret")}}, metav1.CreateOptions{})
	mustCreate(t, "secret", sec, err)

	exp := int64(600)
	apiVol, apiMount := kubeAPIAccess()
	main := busybox("main", `trap 'exit 0' TERM; while true; do sleep 1; done`)
	main.VolumeMounts = []v1.VolumeMount{
		{Name: "proj", MountPath: "/etc/proj"},
		{Name: "plain", MountPath: "/etc/plain"},
		{Name: "plain", MountPath: "/etc/sub-a", SubPath: "a"},
		{Name: "mem", MountPath: "/mem"},
		apiMount,
	}
	memLimit := resource.MustParse("32Mi")
	grace := int64(2)
	pod := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "proj", Namespace: ns, Labels: map[string]string{"app": "proj"}},
		Spec: v1.PodSpec{
			ServiceAccountName:            "robot",
			TerminationGracePeriodSeconds: &grace,
			Containers:                    []v1.Container{main},
			Volumes: []v1.Volume{
				{Name: "proj", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
					{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"},
						Items: []v1.KeyToPath{{Key: "a", Path: "cfg/a"}}}},
					{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "sec"}}},
					{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{
						{Path: "labels", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
						{Path: "name", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}},
					}}},
					{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Audience: "vk-e2e", ExpirationSeconds: &exp, Path: "token"}},
				}}}},
				{Name: "plain", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}},
				{Name: "mem", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory, SizeLimit: &memLimit}}},
				apiVol,
			},
		},
	})
	p := waitRunning(t, ns, pod.Name)

	read := func(path string) string { return execIn(t, p, "main", "cat", path) }
	for path, want := range map[string]string{
		"/etc/proj/cfg/a": "one", "/etc/proj/pw": "s3cret", "/etc/proj/labels": `app="proj"`, "/etc/proj/name": "proj",
		"/etc/plain/a": "one", "/etc/sub-a": "one",
		"/var/run/secrets/kubernetes.io/serviceaccount/namespace": ns,
		"/var/run/secrets/kubernetes.io/serviceaccount/ca.crt":    string(restConfig.CAData),
	} {
		if got := read(path); got != want {
			t.Errorf("%s = %q, want %q", path, got, want)
		}
	}
	// The memory emptyDir is a tmpfs of the sizeLimit.
	if m := execIn(t, p, "main", "grep", " /mem ", "/proc/mounts"); !strings.HasPrefix(m, "tmpfs /mem tmpfs") || !strings.Contains(m, "size=32768k") {
		t.Errorf("/mem is not a 32Mi tmpfs: %q", m)
	}
	// kubelet's layout: the names are links into ..data.
	if ls := execIn(t, p, "main", "ls", "-a", "/etc/proj"); !strings.Contains(ls, "..data") {
		t.Errorf("ls -a /etc/proj: %q", ls)
	}

	// Both tokens authenticate, as the pod's service account and bound to
	// the pod; the projected one only for its audience.
	for _, tc := range []struct {
		path string
		auds []string
	}{
		{"/etc/proj/token", []string{"vk-e2e"}},
		{"/var/run/secrets/kubernetes.io/serviceaccount/token", nil},
	} {
		token := read(tc.path)
		tr, err := client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
			Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: tc.auds}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("TokenReview: %v", err)
		}
		st := tr.Status
		if !st.Authenticated || st.User.Username != "system:serviceaccount:"+ns+":robot" ||
			!slices.Equal(st.User.Extra["authentication.kubernetes.io/pod-uid"], []string{string(p.UID)}) ||
			!slices.Equal(st.User.Extra["authentication.kubernetes.io/pod-name"], []string{"proj"}) {
			t.Errorf("TokenReview of %s: %+v", tc.path, st)
		}
		t.Logf("%s: authenticated as %s, bound to pod %v, audiences %v", tc.path, st.User.Username, st.User.Extra["authentication.kubernetes.io/pod-uid"], st.Audiences)
	}
	// A request made with the automounted token, as a client in the pod
	// would make it (with the mounted CA).
	token := read("/var/run/secrets/kubernetes.io/serviceaccount/token")
	podClient, err := kubernetes.NewForConfig(&rest.Config{Host: restConfig.Host, BearerToken: token,
		TLSClientConfig: rest.TLSClientConfig{CAData: []byte(read("/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"))}})
	if err != nil {
		t.Fatal(err)
	}
	ssr, err := podClient.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil || ssr.Status.UserInfo.Username != "system:serviceaccount:"+ns+":robot" {
		t.Errorf("request with the pod's token: %v %+v", err, ssr)
	}

	// Updates reach the running container, within seconds (the informer
	// wakes the pod; the resync alone would take up to 30 s).
	cm.Data["a"] = "two"
	if _, err := core.ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitFor(t, "configMap update in the container", 15*time.Second, func() (bool, string) {
		a, err1 := tryExec(p, "main", "cat", "/etc/proj/cfg/a")
		b, err2 := tryExec(p, "main", "cat", "/etc/plain/a")
		return a == "two" && b == "two", fmt.Sprintf("projected %q (%v), configMap %q (%v)", a, err1, b, err2)
	})
	t.Logf("configMap update visible in the container after %v", time.Since(start).Round(time.Millisecond))
	sec.Data["pw"] = []byte("new-pw")
	if _, err := core.Secrets(ns).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	waitFor(t, "secret update in the container", 15*time.Second, func() (bool, string) {
		a, err := tryExec(p, "main", "cat", "/etc/proj/pw")
		return a == "new-pw", fmt.Sprintf("%q (%v)", a, err)
	})
	t.Logf("secret update visible in the container after %v", time.Since(start).Round(time.Millisecond))
	// As with kubelet, a subPath mount keeps what it was started with.
	if got := read("/etc/sub-a"); got != "one" {
		t.Errorf("subPath mount changed to %q", got)
	}
	// Labels changed on the pod reach the downwardAPI file too.
	if _, err := core.Pods(ns).Patch(ctx, p.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"proj2"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "label update in the container", 15*time.Second, func() (bool, string) {
		a, err := tryExec(p, "main", "cat", "/etc/proj/labels")
		return a == `app="proj2"`, fmt.Sprintf("%q (%v)", a, err)
	})

	// Deleted, the pod leaves no tmpfs mounted on the host.
	deletePod(t, ns, p.Name, 60*time.Second)
	waitFor(t, "the pod's tmpfs unmounted", 10*time.Second, func() (bool, string) {
		b, err := os.ReadFile("/proc/self/mountinfo")
		return err == nil && !strings.Contains(string(b), string(p.UID)), fmt.Sprint(err)
	})
}

// TestServiceLinks checks the service link variables of a Service made
// before the pod, with enableServiceLinks on and off, and the env from
// resourceFieldRef and fieldRef the test pod asks for.
func TestServiceLinks(t *testing.T) {
	need(t)
	ns := namespace(t)
	ctx := context.Background()
	svc, err := client.CoreV1().Services(ns).Create(ctx, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web-svc"},
		Spec: v1.ServiceSpec{Ports: []v1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)},
			{Name: "dns", Port: 53, Protocol: v1.ProtocolUDP},
		}},
	}, metav1.CreateOptions{})
	mustCreate(t, "service", svc, err)
	ip := svc.Spec.ClusterIP
	// The API server's own service, which every pod gets, links or not.
	var master *v1.Service
	waitFor(t, "service default/kubernetes", 30*time.Second, func() (bool, string) {
		master, err = client.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})

	makePod := func(name string, links bool) *v1.Pod {
		c := busybox("main", `trap 'exit 0' TERM; while true; do sleep 1; done`)
		c.Resources.Limits = v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi")}
		c.Env = []v1.EnvVar{
			{Name: "URL", Value: "http://$(WEB_SVC_SERVICE_HOST):$(WEB_SVC_SERVICE_PORT_HTTP)"},
			{Name: "MEM_MI", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}},
			{Name: "CPU_LIMIT", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: "limits.cpu"}}},
			{Name: "SA", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "spec.serviceAccountName"}}},
			{Name: "HOST_IPS", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "status.hostIPs"}}},
			{Name: "POD_IPS", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "status.podIPs"}}},
		}
		grace := int64(2)
		return createPod(t, &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: v1.PodSpec{EnableServiceLinks: &links, ServiceAccountName: "default", TerminationGracePeriodSeconds: &grace,
				AutomountServiceAccountToken: new(bool), Containers: []v1.Container{c}},
		})
	}
	env := func(p *v1.Pod) map[string]string {
		m := map[string]string{}
		for _, l := range strings.Split(execIn(t, p, "main", "env"), "\n") {
			if k, v, ok := strings.Cut(l, "="); ok {
				m[k] = v
			}
		}
		return m
	}
	makePod("links", true)
	makePod("nolinks", false)
	on, off := waitRunning(t, ns, "links"), waitRunning(t, ns, "nolinks")

	e := env(on)
	node, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"WEB_SVC_SERVICE_HOST":      ip,
		"WEB_SVC_SERVICE_PORT":      "80",
		"WEB_SVC_SERVICE_PORT_HTTP": "80",
		"WEB_SVC_SERVICE_PORT_DNS":  "53",
		"WEB_SVC_PORT":              "tcp://" + ip + ":80",
		"WEB_SVC_PORT_80_TCP":       "tcp://" + ip + ":80",
		"WEB_SVC_PORT_80_TCP_PROTO": "tcp",
		"WEB_SVC_PORT_80_TCP_PORT":  "80",
		"WEB_SVC_PORT_80_TCP_ADDR":  ip,
		"WEB_SVC_PORT_53_UDP":       "udp://" + ip + ":53",
		"WEB_SVC_PORT_53_UDP_PROTO": "udp",
		"KUBERNETES_SERVICE_HOST":   master.Spec.ClusterIP,
		"KUBERNETES_SERVICE_PORT":   fmt.Sprint(master.Spec.Ports[0].Port),
		"URL":                       "http://" + ip + ":80",
		"MEM_MI":                    "64",
		"CPU_LIMIT":                 fmt.Sprint(node.Status.Allocatable.Cpu().Value()), // no limit: the node's
		"SA":                        "default",
		"HOST_IPS":                  "127.0.0.1",
		"POD_IPS":                   strings.Join(podIPList(on), ","),
	}
	for k, v := range want {
		if e[k] != v {
			t.Errorf("links pod: %s = %q, want %q", k, e[k], v)
		}
	}
	e = env(off)
	for k := range e {
		if strings.HasPrefix(k, "WEB_SVC_") {
			t.Errorf("enableServiceLinks false, yet %s=%s", k, e[k])
		}
	}
	if e["KUBERNETES_SERVICE_HOST"] != master.Spec.ClusterIP {
		t.Errorf("enableServiceLinks false: KUBERNETES_SERVICE_HOST = %q, want %q (always set)", e["KUBERNETES_SERVICE_HOST"], master.Spec.ClusterIP)
	}
	if e["URL"] != "http://$(WEB_SVC_SERVICE_HOST):$(WEB_SVC_SERVICE_PORT_HTTP)" {
		t.Errorf("unresolved reference: URL = %q", e["URL"])
	}
}

func podIPList(p *v1.Pod) []string {
	var ips []string
	for _, ip := range p.Status.PodIPs {
		ips = append(ips, ip.IP)
	}
	return ips
}
