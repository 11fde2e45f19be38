package vk

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// fakeIssuer plays the TokenRequest API: token-N, valid for the asked
// lifetime (default 1 h) from the fake clock's now.
type fakeIssuer struct {
	clock *clocktesting.FakeClock
	n     int
	fail  bool
	last  *authenticationv1.TokenRequest
	sa    string
}

func (f *fakeIssuer) request(_ context.Context, ns, sa string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	if f.fail {
		return nil, errors.New("API server away")
	}
	f.n++
	f.last, f.sa = tr, ns+"/"+sa
	out := tr.DeepCopy()
	exp := int64(3600)
	if tr.Spec.ExpirationSeconds != nil {
		exp = *tr.Spec.ExpirationSeconds
	}
	out.Spec.ExpirationSeconds = &exp
	out.Status = authenticationv1.TokenRequestStatus{
		Token:               fmt.Sprintf("token-%d", f.n),
		ExpirationTimestamp: metav1.NewTime(f.clock.Now().Add(time.Duration(exp) * time.Second)),
	}
	return out, nil
}

func TestTokenManagerRefresh(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	iss := &fakeIssuer{clock: clk}
	m := newTokenManager(iss.request, clk)
	exp := int64(1000)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"}, Spec: v1.PodSpec{ServiceAccountName: "sa"}}
	src := &v1.ServiceAccountTokenProjection{Audience: "aud", ExpirationSeconds: &exp, Path: "token"}
	get := func() string {
		t.Helper()
		tr, err := m.token(context.Background(), "ns", serviceAccountName(pod), podTokenRequest(pod, src))
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	if tok := get(); tok != "token-1" {
		t.Fatalf("first token %q", tok)
	}
	// Bound to the pod, for the audience, as asked.
	ref := iss.last.Spec.BoundObjectRef
	if iss.sa != "ns/sa" || ref.Kind != "Pod" || ref.Name != "p" || ref.UID != "u1" || len(iss.last.Spec.Audiences) != 1 || iss.last.Spec.Audiences[0] != "aud" {
		t.Errorf("request %s %+v", iss.sa, iss.last.Spec)
	}
	// Cached until 80% of the lifetime has passed (less the jitter).
	clk.Step(780 * time.Second)
	if tok := get(); tok != "token-1" {
		t.Errorf("refreshed early: %q", tok)
	}
	clk.Step(21 * time.Second) // 801 s: past 80%
	if tok := get(); tok != "token-2" {
		t.Errorf("not refreshed at 80%%: %q", tok)
	}
	// A failed refresh keeps serving the valid token; an expired one is
	// an error.
	iss.fail = true
	clk.Step(900 * time.Second)
	if tok := get(); tok != "token-2" {
		t.Errorf("during an outage: %q", tok)
	}
	clk.Step(200 * time.Second)
	if _, err := m.token(context.Background(), "ns", "sa", podTokenRequest(pod, src)); err == nil {
		t.Error("expired token served")
	}
	iss.fail = false

	// 24 h at most, whatever the lifetime.
	long := int64(7 * 24 * 3600)
	srcLong := &v1.ServiceAccountTokenProjection{ExpirationSeconds: &long, Path: "token"}
	tr, _ := m.token(context.Background(), "ns", "sa", podTokenRequest(pod, srcLong))
	first := tr.Status.Token
	clk.Step(23 * time.Hour)
	if tr, _ = m.token(context.Background(), "ns", "sa", podTokenRequest(pod, srcLong)); tr.Status.Token != first {
		t.Error("refreshed before 24 h")
	}
	clk.Step(time.Hour + time.Second)
	if tr, _ = m.token(context.Background(), "ns", "sa", podTokenRequest(pod, srcLong)); tr.Status.Token == first {
		t.Error("not refreshed after 24 h")
	}
	if len(iss.last.Spec.Audiences) != 0 {
		t.Errorf("no audience asked, got %v", iss.last.Spec.Audiences)
	}

	// The pod's tokens go with it.
	m.forgetPod("u1")
	if len(m.cache) != 0 {
		t.Errorf("%d tokens left after the pod", len(m.cache))
	}
}

func TestServiceAccountName(t *testing.T) {
	for _, c := range []struct {
		spec v1.PodSpec
		want string
	}{{v1.PodSpec{}, "default"}, {v1.PodSpec{ServiceAccountName: "a"}, "a"}, {v1.PodSpec{DeprecatedServiceAccount: "b"}, "b"}} {
		if got := serviceAccountName(&v1.Pod{Spec: c.spec}); got != c.want {
			t.Errorf("%+v: %q", c.spec, got)
		}
	}
}
