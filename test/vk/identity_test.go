package vk_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// vk-cri runs as a kubelet does: with the node's own identity, a client
// certificate for system:node:<name> in group system:nodes signed by the
// API server's client CA, behind --authorization-mode=Node,RBAC and the
// NodeRestriction admission plugin (TestMain sets both), with nothing
// granted to it beyond what the Node authorizer gives every node.

// vkKubeconfig is the suite's vk-cri's kubeconfig: its node's identity.
var vkKubeconfig string

// nodeAuthorization is the API server's authorization and admission, as
// a cluster that restricts its kubelets has them.
var nodeAuthorization = map[string]string{
	"authorization-mode":       "Node,RBAC",
	"enable-admission-plugins": "NodeRestriction",
}

// nodeKubeconfig writes a kubeconfig with node name's identity and
// returns its path.
func nodeKubeconfig(name string) (string, error) {
	u, err := env.AddUser(envtest.User{Name: "system:node:" + name, Groups: []string{"system:nodes"}}, &rest.Config{})
	if err != nil {
		return "", err
	}
	b, err := u.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(runDir, "kubeconfig-"+name)
	return path, os.WriteFile(path, b, 0o600)
}

// mustNodeKubeconfig is nodeKubeconfig for a test's own vk-cri.
func mustNodeKubeconfig(t *testing.T, name string) string {
	t.Helper()
	path, err := nodeKubeconfig(name)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// TestNodeIdentity: vk-cri registered with the node's identity and
// nothing more, its pod reads a configMap volume, a secret volume, a
// secretKeyRef env and a projected service account token (and a secret's
// update reaches it), and the same credentials are refused what the Node
// authorizer keeps from a node: secrets cluster- and namespace-wide, a
// secret no pod of the node references, another node's objects.
func TestNodeIdentity(t *testing.T) {
	need(t)
	ctx := context.Background()

	// The credentials vk-cri runs with: its --kubeconfig.
	cfg, err := clientcmd.BuildConfigFromFlags("", vkKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	nodeClient, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	self, err := nodeClient.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if u := self.Status.UserInfo; u.Username != "system:node:"+nodeName || !slices.Contains(u.Groups, "system:nodes") {
		t.Fatalf("vk-cri's kubeconfig authenticates as %s %v, want system:node:%s in system:nodes", u.Username, u.Groups, nodeName)
	}
	// Nothing is bound to it: what it can do, the Node authorizer gives.
	crbs, err := client.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rbs, err := client.RbacV1().RoleBindings("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range crbs.Items {
		for _, s := range b.Subjects {
			if s.Name == self.Status.UserInfo.Username || s.Name == "system:nodes" {
				t.Errorf("clusterRoleBinding %s grants the node %s", b.Name, b.RoleRef.Name)
			}
		}
	}
	for _, b := range rbs.Items {
		for _, s := range b.Subjects {
			if s.Name == self.Status.UserInfo.Username || s.Name == "system:nodes" {
				t.Errorf("roleBinding %s/%s grants the node %s", b.Namespace, b.Name, b.RoleRef.Name)
			}
		}
	}
	n, err := nodeClient.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the node reading its own Node: %v", err)
	}
	for k := range n.Labels {
		if k == "kubernetes.io/role" || strings.HasPrefix(k, "node-role.kubernetes.io/") {
			t.Errorf("node label %s: roles are the admin's to set", k)
		}
	}

	ns := namespace(t)
	core := client.CoreV1()
	serviceAccount(t, ns, "robot")
	cm, err := core.ConfigMaps(ns).Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"}, Data: map[string]string{"a": "one"}}, metav1.CreateOptions{})
	mustCreate(t, "configMap", cm, err)
	sec, err := core.Secrets(ns).Create(ctx, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds"}, Data: map[string][]byte{"pw": []byte("s3cret")}}, metav1.CreateOptions{})
	mustCreate(t, "secret", sec, err)
	envSec, err := core.Secrets(ns).Create(ctx, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "env"}, Data: map[string][]byte{"key": []byte("from-env")}}, metav1.CreateOptions{})
	mustCreate(t, "secret", envSec, err)
	other, err := core.Secrets(ns).Create(ctx, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "not-mounted"}, Data: map[string][]byte{"x": []byte("y")}}, metav1.CreateOptions{})
	mustCreate(t, "secret", other, err)

	apiVol, apiMount := kubeAPIAccess()
	main := busybox("main", `trap 'exit 0' TERM; while true; do sleep 1; done`)
	main.Env = []v1.EnvVar{{Name: "FROM_SECRET", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{
		LocalObjectReference: v1.LocalObjectReference{Name: "env"}, Key: "key"}}}}
	main.VolumeMounts = []v1.VolumeMount{{Name: "cfg", MountPath: "/etc/cfg"}, {Name: "creds", MountPath: "/etc/creds"}, apiMount}
	grace := int64(2)
	pod := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "ident", Namespace: ns},
		Spec: v1.PodSpec{
			ServiceAccountName:            "robot",
			TerminationGracePeriodSeconds: &grace,
			Containers:                    []v1.Container{main},
			Volumes: []v1.Volume{
				{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}},
				{Name: "creds", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "creds"}}},
				apiVol,
			},
		},
	})
	p := waitRunning(t, ns, pod.Name)
	for path, want := range map[string]string{"/etc/cfg/a": "one", "/etc/creds/pw": "s3cret"} {
		if got := execIn(t, p, "main", "cat", path); got != want {
			t.Errorf("%s = %q, want %q", path, got, want)
		}
	}
	if got := execIn(t, p, "main", "sh", "-c", `printf %s "$FROM_SECRET"`); got != "from-env" {
		t.Errorf("FROM_SECRET = %q, want from-env", got)
	}
	token := execIn(t, p, "main", "cat", "/var/run/secrets/kubernetes.io/serviceaccount/token")
	tr, err := client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st := tr.Status; !st.Authenticated || st.User.Username != "system:serviceaccount:"+ns+":robot" {
		t.Errorf("the pod's token: %+v", st)
	}
	// The secret's watch (by name, as the Node authorizer allows) brings
	// its update to the pod.
	sec.Data["pw"] = []byte("rotated")
	if _, err := core.Secrets(ns).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the secret's update in the pod", 30*time.Second, func() (bool, string) {
		got, err := tryExec(p, "main", "cat", "/etc/creds/pw")
		return err == nil && got == "rotated", got
	})

	// What the node may read: the objects its pod references, its pods.
	if _, err := nodeClient.CoreV1().Secrets(ns).Get(ctx, "creds", metav1.GetOptions{}); err != nil {
		t.Errorf("the node reading a secret its pod mounts: %v", err)
	}
	if _, err := nodeClient.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName}); err != nil {
		t.Errorf("the node listing its pods: %v", err)
	}

	// And what it may not.
	otherNode := "vk-e2e-other-" + runID
	on, err := core.Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: otherNode}}, metav1.CreateOptions{})
	mustCreate(t, "node", on, err)
	t.Cleanup(func() { _ = core.Nodes().Delete(context.Background(), otherNode, metav1.DeleteOptions{}) })
	nc := nodeClient.CoreV1()
	for what, call := range map[string]func() error{
		"list secrets cluster-wide": func() error { _, err := nc.Secrets("").List(ctx, metav1.ListOptions{}); return err },
		"list secrets of the pod's namespace": func() error {
			_, err := nc.Secrets(ns).List(ctx, metav1.ListOptions{})
			return err
		},
		"list configMaps cluster-wide": func() error { _, err := nc.ConfigMaps("").List(ctx, metav1.ListOptions{}); return err },
		"get a secret no pod of the node references": func() error {
			_, err := nc.Secrets(ns).Get(ctx, "not-mounted", metav1.GetOptions{})
			return err
		},
		"watch a secret no pod of the node references": func() error {
			w, err := nc.Secrets(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=not-mounted"})
			if err == nil {
				w.Stop()
			}
			return err
		},
		"list pods of every node": func() error { _, err := nc.Pods("").List(ctx, metav1.ListOptions{}); return err },
		"get another node":        func() error { _, err := nc.Nodes().Get(ctx, otherNode, metav1.GetOptions{}); return err },
		"list nodes":              func() error { _, err := nc.Nodes().List(ctx, metav1.ListOptions{}); return err },
		"label another node": func() error {
			_, err := nc.Nodes().Patch(ctx, otherNode, "application/merge-patch+json", []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
			return err
		},
		"get another node's lease": func() error {
			_, err := nodeClient.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(ctx, otherNode, metav1.GetOptions{})
			return err
		},
		"give itself a role": func() error {
			_, err := nc.Nodes().Patch(ctx, nodeName, "application/merge-patch+json",
				[]byte(`{"metadata":{"labels":{"node-role.kubernetes.io/worker":""}}}`), metav1.PatchOptions{})
			return err
		},
	} {
		if err := call(); !apierrors.IsForbidden(err) {
			t.Errorf("the node's credentials: %s: %v, want Forbidden", what, err)
		}
	}

	// vk-cri itself asked for nothing cluster-wide that was refused (as
	// its configMap and secret informers were, before).
	for _, f := range vkLogs(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "forbidden") && strings.Contains(line, "cluster scope") {
				t.Errorf("%s: %s", filepath.Base(f), line)
			}
		}
	}
}

// serviceAccount makes the service account name in ns, and what a pod's
// kube-api-access volume needs beside it: the kube-root-ca.crt configMap
// that kube-controller-manager's root-ca-cert-publisher would make.
func serviceAccount(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	sa, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	mustCreate(t, "service account", sa, err)
	_, err = client.CoreV1().ConfigMaps(ns).Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt"},
		Data: map[string]string{"ca.crt": string(restConfig.CAData)}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create kube-root-ca.crt: %v", err)
	}
}

// vkLogs are the logs of the suite's vk-cri, every start of it.
func vkLogs(t *testing.T) []string {
	t.Helper()
	logs, err := filepath.Glob(filepath.Join(runDir, "vk-cri.*.log"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("no vk-cri log in %s: %v", runDir, err)
	}
	return logs
}
