package vk

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/kubernetes"
)

// Authorization modes of the kubelet API, with kubelet's names.
const (
	AuthzWebhook     = "Webhook"
	AuthzAlwaysAllow = "AlwaysAllow"
)

// kubelet's defaults (KubeletConfiguration v1beta1): the token webhook's
// cache, and the authorization webhook's for allowed and denied answers.
const (
	tokenCacheTTL = 2 * time.Minute
	allowCacheTTL = 5 * time.Minute
	denyCacheTTL  = 30 * time.Second
)

// AuthConfig is how the kubelet API authenticates and authorizes its
// callers, as kubelet's --client-ca-file, --authentication-token-webhook,
// --anonymous-auth and --authorization-mode do.
type AuthConfig struct {
	// ClientCAFile, when set, makes client certificates it signed
	// authenticate (user = CN, groups = O): the API server's own path.
	ClientCAFile string
	// TokenWebhook makes bearer tokens authenticate through TokenReview.
	TokenWebhook bool
	// Anonymous lets a request without credentials through as
	// system:anonymous (then up to the authorizer); otherwise it is 401.
	Anonymous bool
	// Mode is AuthzWebhook (SubjectAccessReview on nodes/<subresource>)
	// or AuthzAlwaysAllow.
	Mode string
}

// Open reports whether anyone at all may use the API, which then must
// not listen beyond loopback.
func (c AuthConfig) Open() bool {
	return c.Anonymous && c.Mode == AuthzAlwaysAllow
}

// kubeletAuth is nodeutil.Auth from its three parts.
type kubeletAuth struct {
	authenticator.Request
	authorizer.RequestAttributesGetter
	authorizer.Authorizer
}

// NewAuth builds the kubelet API's authenticator and authorizer from
// k8s.io/apiserver's delegating ones, as kubelet does (cmd/kubelet's
// BuildAuth), with kubelet's cache times. The request attributes are
// kubelet's (kubeletAttrs): resource nodes, name = the node, verb from the
// HTTP method, a subresource from the path.
func NewAuth(client kubernetes.Interface, nodeName string, c AuthConfig) (nodeutil.Auth, error) {
	authn := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                &apiserver.AnonymousAuthConfig{Enabled: c.Anonymous},
		CacheTTL:                 tokenCacheTTL,
		TokenAccessReviewTimeout: 10 * time.Second,
		WebhookRetryBackoff:      options.DefaultAuthWebhookRetryBackoff(),
	}
	if c.ClientCAFile != "" {
		ca, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca-file", c.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("client CA: %w", err)
		}
		authn.ClientCertificateCAContentProvider = ca
	}
	if c.TokenWebhook {
		if client == nil {
			return nil, errors.New("the token webhook needs a client of the API server")
		}
		authn.TokenAccessReviewClient = client.AuthenticationV1()
	}
	a, _, err := authn.New()
	if err != nil {
		return nil, err
	}
	var z authorizer.Authorizer
	switch c.Mode {
	case AuthzAlwaysAllow:
		z = authorizerfactory.NewAlwaysAllowAuthorizer()
	case AuthzWebhook:
		if client == nil {
			return nil, errors.New("webhook authorization needs a client of the API server")
		}
		z, err = authorizerfactory.DelegatingAuthorizerConfig{
			SubjectAccessReviewClient: client.AuthorizationV1(),
			AllowCacheTTL:             allowCacheTTL,
			DenyCacheTTL:              denyCacheTTL,
			WebhookRetryBackoff:       options.DefaultAuthWebhookRetryBackoff(),
		}.New()
		if err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("authorization mode %q: want %s or %s", c.Mode, AuthzWebhook, AuthzAlwaysAllow)
	}
	return nodeutil.InstrumentAuth(&kubeletAuth{
		Request:                 a,
		RequestAttributesGetter: kubeletAttrs{nodeutil.NodeRequestAttr{NodeName: nodeName}},
		Authorizer:              proxyFallback{z},
	}), nil
}

// kubeletAttrs are kubelet's request attributes with fine-grained
// authorization (KubeletFineGrainedAuthz, GA in 1.36): nodeutil's give
// stats, metrics and log for /stats, /metrics and /logs and proxy for the
// rest (containerLogs, exec, attach, portForward); kubelet also names
// pods, healthz, configz, spec and checkpoint.
type kubeletAttrs struct{ nodeutil.NodeRequestAttr }

func (k kubeletAttrs) GetRequestAttributes(u user.Info, r *http.Request) authorizer.Attributes {
	a := k.NodeRequestAttr.GetRequestAttributes(u, r)
	rec, ok := a.(authorizer.AttributesRecord)
	if !ok {
		return a
	}
	for prefix, sub := range map[string]string{
		"/pods": "pods", "/runningpods": "pods", "/healthz": "healthz", "/configz": "configz",
		"/spec": "spec", "/checkpoint": "checkpoint",
	} {
		if p := r.URL.Path; p == prefix || strings.HasPrefix(p, prefix+"/") {
			rec.Subresource = sub
		}
	}
	return rec
}

// proxyFallback asks again for nodes/proxy when nodes/pods, healthz or
// configz is refused, as kubelet does: nodes/proxy has always covered them.
type proxyFallback struct{ authorizer.Authorizer }

func (f proxyFallback) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	d, reason, err := f.Authorizer.Authorize(ctx, a)
	rec, ok := a.(authorizer.AttributesRecord)
	if d == authorizer.DecisionAllow || !ok || !slices.Contains([]string{"pods", "healthz", "configz"}, rec.Subresource) {
		return d, reason, err
	}
	rec.Subresource = "proxy"
	return f.Authorizer.Authorize(ctx, rec)
}

// WithAuth puts h behind auth: 401 for a caller that did not
// authenticate, 403 for one the authorizer refuses, 500 when the
// authorizer could not answer.
func WithAuth(auth nodeutil.Auth, h http.Handler) http.Handler {
	return nodeutil.WithAuth(auth, h)
}
