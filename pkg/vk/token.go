package vk

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Service account tokens for projected volumes come from the TokenRequest
// API, bound to the pod, and are refreshed as kubelet's token manager
// (pkg/kubelet/token) does: once 80% of their lifetime has passed, or after
// 24 h, with a few seconds of jitter so that many pods do not ask at once.

const (
	tokenMaxTTL    = 24 * time.Hour
	tokenMaxJitter = 10 * time.Second
	tokenGCPeriod  = time.Minute
)

// tokenRequester asks the API server for a token (CreateToken).
type tokenRequester func(ctx context.Context, namespace, serviceAccount string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error)

// clientTokenRequester is the TokenRequest API through client.
func clientTokenRequester(client kubernetes.Interface) tokenRequester {
	return func(ctx context.Context, ns, sa string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
		return client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, tr, metav1.CreateOptions{})
	}
}

// tokenManager caches tokens by what they were asked for.
type tokenManager struct {
	request tokenRequester
	clock   clock.PassiveClock

	mu     sync.Mutex
	cache  map[string]*authenticationv1.TokenRequest
	lastGC time.Time
}

func newTokenManager(request tokenRequester, clk clock.PassiveClock) *tokenManager {
	return &tokenManager{request: request, clock: clk, cache: map[string]*authenticationv1.TokenRequest{}}
}

func tokenKey(ns, sa string, tr *authenticationv1.TokenRequest) string {
	var exp int64
	if tr.Spec.ExpirationSeconds != nil {
		exp = *tr.Spec.ExpirationSeconds
	}
	var uid types.UID
	if tr.Spec.BoundObjectRef != nil {
		uid = tr.Spec.BoundObjectRef.UID
	}
	return fmt.Sprintf("%s/%s/%q/%d/%s", ns, sa, tr.Spec.Audiences, exp, uid)
}

// token returns a valid token for tr, from the cache unless it is due for
// a refresh. When a refresh fails, a token that has not expired yet is
// still served, as kubelet does.
func (m *tokenManager) token(ctx context.Context, ns, sa string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	key := tokenKey(ns, sa, tr)
	m.mu.Lock()
	m.gcLocked()
	cached := m.cache[key]
	m.mu.Unlock()
	if cached != nil && !m.requiresRefresh(cached) {
		return cached, nil
	}
	got, err := m.request(ctx, ns, sa, tr)
	if err != nil {
		if cached != nil && !m.expired(cached) {
			klog.ErrorS(err, "Could not refresh a service account token; the current one is still valid", "namespace", ns, "serviceAccount", sa)
			return cached, nil
		}
		return nil, fmt.Errorf("token for service account %s/%s: %w", ns, sa, err)
	}
	if got.Spec.ExpirationSeconds == nil {
		got.Spec.ExpirationSeconds = tr.Spec.ExpirationSeconds
	}
	m.mu.Lock()
	m.cache[key] = got
	m.mu.Unlock()
	klog.V(3).InfoS("Service account token issued", "namespace", ns, "serviceAccount", sa, "expires", got.Status.ExpirationTimestamp.Time)
	return got, nil
}

func (m *tokenManager) expired(tr *authenticationv1.TokenRequest) bool {
	return !m.clock.Now().Before(tr.Status.ExpirationTimestamp.Time)
}

// requiresRefresh: 80% of the lifetime (20% before expiry) or 24 h since
// issue, less a jitter.
func (m *tokenManager) requiresRefresh(tr *authenticationv1.TokenRequest) bool {
	if tr.Spec.ExpirationSeconds == nil {
		return m.expired(tr)
	}
	ttl := time.Duration(*tr.Spec.ExpirationSeconds) * time.Second
	exp := tr.Status.ExpirationTimestamp.Time
	iat := exp.Add(-ttl)
	jitter := time.Duration(rand.Float64() * float64(tokenMaxJitter))
	now := m.clock.Now()
	return now.After(iat.Add(tokenMaxTTL-jitter)) || now.After(exp.Add(-ttl/5-jitter))
}

// gcLocked drops expired tokens, at most once a period.
func (m *tokenManager) gcLocked() {
	now := m.clock.Now()
	if now.Sub(m.lastGC) < tokenGCPeriod {
		return
	}
	m.lastGC = now
	for k, tr := range m.cache {
		if m.expired(tr) {
			delete(m.cache, k)
		}
	}
}

// forgetPod drops the tokens bound to the pod with uid, once it is gone.
func (m *tokenManager) forgetPod(uid types.UID) {
	suffix := "/" + string(uid)
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.cache {
		if strings.HasSuffix(k, suffix) {
			delete(m.cache, k)
		}
	}
}

// podTokenRequest is what kubelet asks for a projected
// serviceAccountToken source: the given audience (none: the API server's),
// lifetime, and a binding to the pod, so that the token dies with it.
func podTokenRequest(pod *v1.Pod, s *v1.ServiceAccountTokenProjection) *authenticationv1.TokenRequest {
	var auds []string
	if s.Audience != "" {
		auds = []string{s.Audience}
	}
	return &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences:         auds,
		ExpirationSeconds: s.ExpirationSeconds,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID},
	}}
}

// serviceAccountName is the pod's service account; "default" when unset
// (the ServiceAccount admission plugin sets it, but may be off).
func serviceAccountName(pod *v1.Pod) string {
	if pod.Spec.ServiceAccountName != "" {
		return pod.Spec.ServiceAccountName
	}
	if pod.Spec.DeprecatedServiceAccount != "" {
		return pod.Spec.DeprecatedServiceAccount
	}
	return "default"
}

// serviceAccountToken implements tokenSource.
func (o *apiObjects) serviceAccountToken(pod *v1.Pod, s *v1.ServiceAccountTokenProjection) ([]byte, error) {
	if o.tokens == nil {
		return nil, fmt.Errorf("no API client to request service account tokens")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := o.tokens.token(ctx, pod.Namespace, serviceAccountName(pod), podTokenRequest(pod, s))
	if err != nil {
		return nil, err
	}
	return []byte(tr.Status.Token), nil
}
