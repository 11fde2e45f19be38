package vk

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestPodObjectRefs(t *testing.T) {
	cmRef := func(n string) *v1.ConfigMapKeySelector {
		return &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: n}, Key: "k"}
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns"}, Spec: v1.PodSpec{
		ImagePullSecrets: []v1.LocalObjectReference{{Name: "pull"}},
		Volumes: []v1.Volume{
			{Name: "a", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cm-vol"}}}},
			{Name: "b", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "s-vol"}}},
			{Name: "c", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
				{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "cm-proj"}}},
				{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "s-proj"}}},
				{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token"}},
			}}}},
			{Name: "d", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		},
		InitContainers: []v1.Container{{Name: "i", EnvFrom: []v1.EnvFromSource{
			{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "cm-init"}}}}}},
		Containers: []v1.Container{{Name: "c", Env: []v1.EnvVar{
			{Name: "A", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: cmRef("cm-vol")}}, // again: counted once
			{Name: "B", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "s-env"}, Key: "k"}}},
			{Name: "C", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		}, EnvFrom: []v1.EnvFromSource{{SecretRef: &v1.SecretEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "s-from"}}}}}},
		EphemeralContainers: []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "e",
			Env: []v1.EnvVar{{Name: "D", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: cmRef("cm-eph")}}}}}},
	}}
	want := []objectRef{
		{kindSecret, "ns", "pull"}, {kindConfigMap, "ns", "cm-vol"}, {kindSecret, "ns", "s-vol"},
		{kindConfigMap, "ns", "cm-proj"}, {kindSecret, "ns", "s-proj"}, {kindConfigMap, "ns", "cm-init"},
		{kindSecret, "ns", "s-from"}, {kindSecret, "ns", "s-env"}, {kindConfigMap, "ns", "cm-eph"},
	}
	if got := podObjectRefs(pod); !slices.Equal(got, want) {
		t.Errorf("podObjectRefs =\n%v\nwant\n%v", got, want)
	}
}

func refPod(uid, cm, secret string) *v1.Pod {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: uid, UID: types.UID(uid)}}
	if cm != "" {
		pod.Spec.Volumes = append(pod.Spec.Volumes, v1.Volume{Name: "cm", VolumeSource: v1.VolumeSource{
			ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: cm}}}})
	}
	if secret != "" {
		pod.Spec.Volumes = append(pod.Spec.Volumes, v1.Volume{Name: "s", VolumeSource: v1.VolumeSource{
			Secret: &v1.SecretVolumeSource{SecretName: secret}}})
	}
	return pod
}

// waitCached waits until r's watch has listed it.
func waitCached(t *testing.T, o *objectWatches, r objectRef) any {
	t.Helper()
	// Polled without cached(), which would mark the object as read
	// before its watch listed.
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) {
			o.mu.Lock()
			w := o.watches[r]
			o.mu.Unlock()
			return w != nil && w.synced(), nil
		})
	if err != nil {
		t.Fatalf("%v never listed", r)
	}
	obj, _ := o.cached(r)
	return obj
}

// TestObjectWatchesCounting: one watch per referenced object, by name,
// shared by the pods that reference it and closed with the last of them.
func TestObjectWatchesCounting(t *testing.T) {
	client := fake.NewClientset(
		&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm1"}, Data: map[string]string{"k": "v"}},
		&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm-other"}},
		&v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s1"}},
	)
	o := newObjectWatches(client, func(objectRef) {})
	defer o.stopAll()
	cm1, s1 := objectRef{kindConfigMap, "ns", "cm1"}, objectRef{kindSecret, "ns", "s1"}

	o.registerPod(refPod("a", "cm1", "s1"))
	o.registerPod(refPod("b", "cm1", ""))
	if n := o.watching(); n != 2 {
		t.Fatalf("%d watches for cm1 and s1, want 2", n)
	}
	if cm, _ := waitCached(t, o, cm1).(*v1.ConfigMap); cm == nil || cm.Data["k"] != "v" {
		t.Errorf("cm1 from its watch = %v", cm)
	}
	waitCached(t, o, s1)
	if _, ok := o.cached(objectRef{kindConfigMap, "ns", "cm-other"}); ok {
		t.Error("cm-other, which no pod references, is cached")
	}
	// Every list and watch names its object.
	for _, a := range client.Actions() {
		la, ok := a.(k8stesting.ListAction)
		if !ok {
			continue
		}
		sel := la.GetListRestrictions().Fields.String()
		if a.GetNamespace() != "ns" || (sel != "metadata.name=cm1" && sel != "metadata.name=s1") {
			t.Errorf("%s %s in %q with field selector %q, want one object by name", a.GetVerb(), a.GetResource().Resource, a.GetNamespace(), sel)
		}
	}

	o.unregisterPod("a") // b still mounts cm1
	if n := o.watching(); n != 1 {
		t.Errorf("%d watches after pod a went, want 1 (cm1)", n)
	}
	if _, ok := o.cached(s1); ok {
		t.Error("s1 still watched after the only pod referencing it went")
	}
	if _, ok := o.cached(cm1); !ok {
		t.Error("cm1 no longer watched while pod b references it")
	}
	o.registerPod(refPod("b", "", "s1")) // b's new spec: s1 instead of cm1
	if _, ok := o.cached(cm1); ok || o.watching() != 1 {
		t.Errorf("after b's update: cm1 cached %v, %d watches, want s1's only", ok, o.watching())
	}
	o.unregisterPod("b")
	if n := o.watching(); n != 0 {
		t.Errorf("%d watches with no pod left", n)
	}
}

// TestObjectWatchesChanged: a change to a watched object is told, one to
// another object is not; an absent object reads as not found without a
// GET once its watch has listed.
func TestObjectWatchesChanged(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm1"}})
	var mu sync.Mutex
	var changed []objectRef
	objs := newAPIObjects(Config{Client: client}, func(r objectRef) {
		mu.Lock()
		defer mu.Unlock()
		changed = append(changed, r)
	})
	defer objs.watches.stopAll()
	registerObjects(objs, refPod("a", "cm1", "missing"))
	cm1 := objectRef{kindConfigMap, "ns", "cm1"}
	waitCached(t, objs.watches, cm1)
	waitCached(t, objs.watches, objectRef{kindSecret, "ns", "missing"})

	client.ClearActions()
	if _, err := objs.secret("ns", "missing"); !errors.Is(err, errNotFound) {
		t.Errorf("missing secret: %v, want not found", err)
	}
	if _, err := objs.configMap("ns", "cm1"); err != nil {
		t.Errorf("cm1: %v", err)
	}
	for _, a := range client.Actions() {
		t.Errorf("%s %s: read from the API server, not from the watch", a.GetVerb(), a.GetResource().Resource)
	}

	if _, err := client.CoreV1().ConfigMaps("ns").Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "unrelated"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().ConfigMaps("ns").Update(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm1", ResourceVersion: "2"}, Data: map[string]string{"k": "new"}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(changed) > 0, nil
	})
	if err != nil {
		t.Fatal("cm1's update was never told")
	}
	if cm, err := objs.configMap("ns", "cm1"); err != nil || cm.Data["k"] != "new" {
		t.Errorf("cm1 after its update: %v, %v", cm, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(changed, []objectRef{cm1}) {
		t.Errorf("changed %v, want cm1 once (not the unrelated configMap)", changed)
	}
}

// TestObjectWatchesReadBeforeList: an object read from the API server
// before its watch listed may be older than that list, whose change then
// never comes as an update: the list is told as a change. Without such a
// read, the first list is not a change.
func TestObjectWatchesReadBeforeList(t *testing.T) {
	ctx := context.Background()
	sec := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", ResourceVersion: "1"}, Data: map[string][]byte{"k": []byte("old")}}
	client := fake.NewClientset(sec)
	// The watch's lists fail until the test allows them (a reactor
	// cannot block: the fake holds its lock while reactors run).
	var allowed atomic.Bool
	refused := make(chan struct{}, 1)
	client.PrependReactor("list", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		if allowed.Load() {
			return false, nil, nil
		}
		select {
		case refused <- struct{}{}:
		default:
		}
		return true, nil, errors.New("not yet")
	})
	changed := make(chan objectRef, 4)
	objs := newAPIObjects(Config{Client: client}, func(r objectRef) { changed <- r })
	defer objs.watches.stopAll()
	registerObjects(objs, refPod("a", "cm1", "s"))
	cm1, s := objectRef{kindConfigMap, "ns", "cm1"}, objectRef{kindSecret, "ns", "s"}
	waitCached(t, objs.watches, cm1)
	<-refused

	got, err := objs.secret("ns", "s") // the watch has not listed: a GET
	if err != nil || string(got.Data["k"]) != "old" {
		t.Fatalf("secret before the list: %v, %v", got, err)
	}
	sec = sec.DeepCopy()
	sec.ResourceVersion, sec.Data["k"] = "2", []byte("new")
	if _, err := client.CoreV1().Secrets("ns").Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	allowed.Store(true)
	select {
	case r := <-changed:
		if r != s {
			t.Fatalf("changed %v, want %v", r, s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first list after a GET was never told")
	}
	if got := waitCached(t, objs.watches, s).(*v1.Secret); string(got.Data["k"]) != "new" {
		t.Errorf("secret after the list: %q", got.Data["k"])
	}
	select {
	case r := <-changed:
		t.Errorf("changed %v too: cm1's first list followed no GET", r)
	default:
	}
}
