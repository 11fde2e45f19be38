package images

import (
	"encoding/base64"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/distribution/reference"
	"github.com/moby/moby/api/types/registry"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

func TestMirrorsParse(t *testing.T) {
	m, err := ParseMirrors([]string{
		"registry.k8s.io=http://127.0.0.1:5000,http://other.example:5000",
		"gcr.io=127.0.0.1:5000/gcr ; k8s.gcr.io=https://127.0.0.1:5000/v2/k8s/",
		"registry.k8s.io=localhost:6000",
		"",
		"index.docker.io=[::1]:5000",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := Mirrors{
		"registry.k8s.io": {"http://127.0.0.1:5000", "http://other.example:5000", "localhost:6000"},
		"gcr.io":          {"127.0.0.1:5000/gcr"},
		"k8s.gcr.io":      {"https://127.0.0.1:5000/v2/k8s/"},
		"docker.io":       {"[::1]:5000"},
	}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("ParseMirrors = %v, want %v", m, want)
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	again, err := ParseMirrors([]string{m.String()})
	if err != nil || !reflect.DeepEqual(again, m) {
		t.Errorf("ParseMirrors(String()) = %v, %v; want %v", again, err, m)
	}

	for _, bad := range []struct{ spec, says string }{
		{"registry.k8s.io", "REGISTRY=ENDPOINT"},
		{"registry.k8s.io=", "no endpoint"},
		{"=127.0.0.1:5000", "empty registry host"},
		{"https://gcr.io=127.0.0.1:5000", "without a scheme"},
		{"gcr.io=ftp://127.0.0.1:5000", `scheme "ftp"`},
		{"gcr.io=mirror/prefix", "needs a domain"},
		{"gcr.io=http://user:pw@127.0.0.1:5000", "without credentials"},
		{"gcr.io=http://127.0.0.1:5000?x=1", "without credentials, query"},
		{"gcr.io=127.0.0.1:5000/Upper", "not a valid repository path"},
		{"gcr.io=127.0.0.1:port", "not a valid registry host"},
		{"gcr.io=/path", "no host"},
		{"bad host=127.0.0.1:5000", "not a valid registry host"},
	} {
		_, err := ParseMirrors([]string{bad.spec})
		if err == nil || !strings.Contains(err.Error(), bad.says) {
			t.Errorf("ParseMirrors(%q) = %v, want an error saying %q", bad.spec, err, bad.says)
		}
	}
	if err := (Mirrors{"gcr.io": {"nohost"}}).Validate(); err == nil || !strings.Contains(err.Error(), `"gcr.io"`) {
		t.Errorf("Validate of a bad endpoint: %v", err)
	}
}

func TestMirrorRewrite(t *testing.T) {
	for _, c := range []struct{ endpoint, ref, want string }{
		{"http://127.0.0.1:5000", "registry.k8s.io/pause:3.9", "127.0.0.1:5000/pause:3.9"},
		{"127.0.0.1:5000", "registry.k8s.io/e2e-test-images/busybox:1.29-2", "127.0.0.1:5000/e2e-test-images/busybox:1.29-2"},
		{"127.0.0.1:5000/gcr", "gcr.io/k8s-staging-cri-tools/test-image-1", "127.0.0.1:5000/gcr/k8s-staging-cri-tools/test-image-1:latest"},
		{"http://localhost:5000/v2/hub", "busybox", "localhost:5000/hub/library/busybox:latest"},
		{"mirror.example", "gcr.io/x/y@sha256:" + strings.Repeat("ab", 32), "mirror.example/x/y@sha256:" + strings.Repeat("ab", 32)},
	} {
		ep, err := parseMirrorEndpoint(c.endpoint)
		if err != nil {
			t.Fatalf("%s: %v", c.endpoint, err)
		}
		n, err := reference.ParseDockerRef(c.ref)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ep.rewrite(n)
		if err != nil || got.String() != c.want {
			t.Errorf("%s through %s = %v, %v; want %s", c.ref, c.endpoint, got, err, c.want)
		}
	}
}

func TestImageRefParse(t *testing.T) {
	id := "sha256:" + strings.Repeat("0123456789abcdef", 4)
	for _, c := range []struct {
		in                      string
		named, fullID, idPrefix string
		explicit                bool
	}{
		{in: "busybox", named: "docker.io/library/busybox:latest"},
		{in: "busybox:1.36", named: "docker.io/library/busybox:1.36", explicit: true},
		{in: "k8s.gcr.io/pause:3.9", named: "k8s.gcr.io/pause:3.9", explicit: true},
		{in: "docker.io/library/busybox@" + id, named: "docker.io/library/busybox@" + id, explicit: true},
		{in: "busybox:1@" + id, named: "docker.io/library/busybox@" + id, explicit: true},
		{in: id, fullID: id},
		{in: strings.TrimPrefix(id, "sha256:"), fullID: id},
		{in: id[:20], idPrefix: id[:20]},
		{in: "0123456789ab", named: "docker.io/library/0123456789ab:latest", idPrefix: "sha256:0123456789ab"},
	} {
		r, err := ParseRef(c.in)
		if err != nil {
			t.Errorf("ParseRef(%q): %v", c.in, err)
			continue
		}
		named := ""
		if r.Named != nil {
			named = r.Named.String()
		}
		if named != c.named || r.ID != c.fullID || r.IDPrefix != c.idPrefix || r.Explicit != c.explicit {
			t.Errorf("ParseRef(%q) = named %q id %q prefix %q explicit %v; want %q %q %q %v",
				c.in, named, r.ID, r.IDPrefix, r.Explicit, c.named, c.fullID, c.idPrefix, c.explicit)
		}
	}
	for _, bad := range []string{"", "Busybox", "a//b", "busybox:", "x@sha256:12"} {
		if _, err := ParseRef(bad); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("ParseRef(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestImageNormalizeRefs(t *testing.T) {
	dg := "sha256:" + strings.Repeat("ab", 32)
	engine := []string{"busybox:latest", "<none>:<none>", "127.0.0.1:5000/a/b:v1", "k8s.gcr.io/pause:3.9", "busybox@" + dg, "<none>@<none>"}
	if got, want := NormalizeRefs(engine, false), []string{"127.0.0.1:5000/a/b:v1", "docker.io/library/busybox:latest", "k8s.gcr.io/pause:3.9"}; !reflect.DeepEqual(got, want) {
		t.Errorf("tags %q, want %q", got, want)
	}
	if got, want := NormalizeRefs(engine, true), []string{"docker.io/library/busybox@" + dg}; !reflect.DeepEqual(got, want) {
		t.Errorf("digests %q, want %q", got, want)
	}
	for user, want := range map[string][2]any{
		"": {int64(-1), ""}, "0": {int64(0), ""}, "1002": {int64(1002), ""}, "1003:1004": {int64(1003), ""},
		"www-data": {int64(-1), "www-data"}, "www-data:1004": {int64(-1), "www-data"},
	} {
		uid, name := criUser(user)
		got := int64(-1)
		if uid != nil {
			got = uid.Value
		}
		if got != want[0] || name != want[1] {
			t.Errorf("criUser(%q) = %d %q, want %v %v", user, got, name, want[0], want[1])
		}
	}
}

func TestImageAuthConversion(t *testing.T) {
	if PullAuth(nil) != nil || PullAuth(&runtime.AuthConfig{}) != nil {
		t.Error("no credentials should give no engine auth")
	}
	got := PullAuth(&runtime.AuthConfig{Auth: base64.StdEncoding.EncodeToString([]byte("user:p:w")), ServerAddress: "gcr.io"})
	want := &registry.AuthConfig{Username: "user", Password: "p:w", Auth: "dXNlcjpwOnc=", ServerAddress: "gcr.io"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("PullAuth = %+v, want %+v", got, want)
	}
	got = PullAuth(&runtime.AuthConfig{Username: "u", Password: "p", IdentityToken: "i", RegistryToken: "r"})
	want = &registry.AuthConfig{Username: "u", Password: "p", IdentityToken: "i", RegistryToken: "r"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("PullAuth = %+v, want %+v", got, want)
	}
}
