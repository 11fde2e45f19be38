package cri_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/cri"
	criimages "github.com/cri-compose/cri-compose/pkg/cri/images"
	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/test/images"
	"github.com/cri-compose/cri-compose/test/suite"
)

// imageEnv is a real engine, a registry on 127.0.0.1 and an cri.ImageService
// served over gRPC on a unix socket.
type imageEnv struct {
	d      *dockerapi.Client
	reg    string // "127.0.0.1:PORT"
	svc    *cri.ImageService
	cli    runtime.ImageServiceClient
	suffix string // unique per test, for image names
}

// newRegistry is an in-memory registry.
func newRegistry() http.Handler {
	return ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)))
}

// serveRegistry serves h on 127.0.0.1 (which the engine treats as
// insecure: plain HTTP) and returns "127.0.0.1:PORT".
func serveRegistry(t *testing.T, h http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = l
	srv.Config.ReadHeaderTimeout = 10 * time.Second
	srv.Start()
	t.Cleanup(srv.Close)
	return l.Addr().String()
}

func newImageEnv(t *testing.T, mirrors criimages.Mirrors) *imageEnv {
	t.Helper()
	return newImageEnvWith(t, newRegistry(), criimages.Options{Mirrors: mirrors})
}

// newImageEnvWith serves registry h as the test registry: "REGISTRY" in
// o.Mirrors' endpoints stands for its address.
func newImageEnvWith(t *testing.T, h http.Handler, o criimages.Options) *imageEnv {
	t.Helper()
	d := images.Engine(t)
	reg := serveRegistry(t, h)
	for k, eps := range o.Mirrors {
		for i, ep := range eps {
			o.Mirrors[k][i] = strings.ReplaceAll(ep, "REGISTRY", reg)
		}
	}
	svc := cri.NewImageService(d, o, nil)

	conn, _, _ := suite.Serve(t, func(gs *grpc.Server) { runtime.RegisterImageServiceServer(gs, svc) })

	b := make([]byte, 4)
	rand.Read(b)
	return &imageEnv{d: d, reg: reg, svc: svc, cli: runtime.NewImageServiceClient(conn), suffix: hex.EncodeToString(b)}
}

// push writes a small random image with config User user to the test
// registry as repo:tag (repo without the registry host) and returns the
// manifest digest.
func (e *imageEnv) push(t *testing.T, repo, tag, user string) string {
	t.Helper()
	img, err := random.Image(512, 1)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config = v1.Config{User: user, Cmd: []string{"/nothing"}}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return e.pushImage(t, img, repo, tag)
}

func (e *imageEnv) pushImage(t *testing.T, img v1.Image, repo, tag string) string {
	t.Helper()
	ref, err := name.ParseReference(e.reg+"/"+repo+":"+tag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	dg, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return dg.String()
}

// cleanupImage removes the image with id at the end of the test, whatever
// names it has by then.
func (e *imageEnv) cleanupImage(t *testing.T, id string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := e.d.ImageRemove(ctx, id, true); err != nil && !dockerapi.IsNotFound(err) {
			t.Logf("cleanup image %s: %v", id, err)
		}
	})
}

func (e *imageEnv) pull(t *testing.T, ref string) string {
	t.Helper()
	resp, err := e.cli.PullImage(imageTestCtx(t), &runtime.PullImageRequest{Image: &runtime.ImageSpec{Image: ref}})
	if err != nil {
		t.Fatalf("PullImage %s: %v", ref, err)
	}
	id := resp.GetImageRef()
	if !criimages.FullIDPattern.MatchString(id) || !strings.HasPrefix(id, "sha256:") {
		t.Fatalf("PullImage %s: image ref %q is not an image id", ref, id)
	}
	e.cleanupImage(t, id)
	return id
}

func (e *imageEnv) status(t *testing.T, ref string) *runtime.Image {
	t.Helper()
	resp, err := e.cli.ImageStatus(imageTestCtx(t), &runtime.ImageStatusRequest{Image: &runtime.ImageSpec{Image: ref}})
	if err != nil {
		t.Fatalf("ImageStatus %s: %v", ref, err)
	}
	return resp.GetImage()
}

func (e *imageEnv) list(t *testing.T, filter string) []*runtime.Image {
	t.Helper()
	req := &runtime.ListImagesRequest{}
	if filter != "" {
		req.Filter = &runtime.ImageFilter{Image: &runtime.ImageSpec{Image: filter}}
	}
	resp, err := e.cli.ListImages(imageTestCtx(t), req)
	if err != nil {
		t.Fatalf("ListImages %q: %v", filter, err)
	}
	return resp.GetImages()
}

func (e *imageEnv) remove(t *testing.T, ref string) {
	t.Helper()
	if _, err := e.cli.RemoveImage(imageTestCtx(t), &runtime.RemoveImageRequest{Image: &runtime.ImageSpec{Image: ref}}); err != nil {
		t.Fatalf("RemoveImage %s: %v", ref, err)
	}
}

func imageTestCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func findCRIImage(imgs []*runtime.Image, id string) *runtime.Image {
	for _, img := range imgs {
		if img.GetId() == id {
			return img
		}
	}
	return nil
}

func TestImagePullListStatusRemove(t *testing.T) {
	e := newImageEnv(t, nil)
	repo := "test/img-" + e.suffix
	dg := e.push(t, repo, "v1", "1002")
	ref := e.reg + "/" + repo + ":v1"

	id := e.pull(t, ref)

	wantTags := []string{ref}
	wantDigests := []string{e.reg + "/" + repo + "@" + dg}
	check := func(what string, img *runtime.Image) {
		t.Helper()
		if img == nil {
			t.Fatalf("%s: no image", what)
		}
		if img.GetId() != id {
			t.Errorf("%s: id %q, want %q", what, img.GetId(), id)
		}
		if !slices.Equal(img.GetRepoTags(), wantTags) {
			t.Errorf("%s: repo tags %q, want %q", what, img.GetRepoTags(), wantTags)
		}
		if !slices.Equal(img.GetRepoDigests(), wantDigests) {
			t.Errorf("%s: repo digests %q, want %q", what, img.GetRepoDigests(), wantDigests)
		}
		if img.GetSize() == 0 {
			t.Errorf("%s: size 0", what)
		}
		if img.GetUid().GetValue() != 1002 || img.GetUsername() != "" {
			t.Errorf("%s: uid %v username %q, want 1002 and none", what, img.GetUid(), img.GetUsername())
		}
		if img.GetSpec().GetImage() != id {
			t.Errorf("%s: spec image %q, want the id", what, img.GetSpec().GetImage())
		}
		if img.GetPinned() {
			t.Errorf("%s: pinned", what)
		}
	}

	check("ListImages", findCRIImage(e.list(t, ""), id))
	for _, f := range []string{ref, e.reg + "/" + repo, wantDigests[0], id, strings.TrimPrefix(id, "sha256:")[:12]} {
		imgs := e.list(t, f)
		if len(imgs) != 1 {
			t.Fatalf("ListImages filter %q: %d images, want 1", f, len(imgs))
		}
		check("ListImages filter "+f, imgs[0])
	}
	if imgs := e.list(t, e.reg+"/"+repo+":nope"); len(imgs) != 0 {
		t.Errorf("ListImages by a missing tag: %d images", len(imgs))
	}
	for _, r := range []string{ref, id, strings.TrimPrefix(id, "sha256:"), id[:19], wantDigests[0]} {
		check("ImageStatus "+r, e.status(t, r))
	}

	// Verbose status carries the engine's inspect.
	resp, err := e.cli.ImageStatus(imageTestCtx(t), &runtime.ImageStatusRequest{Image: &runtime.ImageSpec{Image: ref}, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	var info struct{ Id string }
	if err := json.Unmarshal([]byte(resp.GetInfo()["info"]), &info); err != nil || info.Id != id {
		t.Errorf("verbose info: %v, id %q, want %q", err, info.Id, id)
	}

	// Resolve, as CreateContainer uses it.
	for _, r := range []string{ref, id} {
		ri, err := e.svc.Resolve(imageTestCtx(t), r)
		if err != nil {
			t.Fatalf("Resolve %s: %v", r, err)
		}
		want := cri.ResolvedImage{ID: id, Ref: ref, RepoDigest: wantDigests[0], User: "1002"}
		if r == id {
			want.Ref = id
		}
		if ri != want {
			t.Errorf("Resolve %s = %+v, want %+v", r, ri, want)
		}
	}

	// Removing by one name removes the others too (CRI, critest).
	other := e.reg + "/" + repo + "-other:v2"
	if err := e.d.ImageTag(imageTestCtx(t), id, other); err != nil {
		t.Fatal(err)
	}
	if img := e.status(t, other); img == nil || len(img.GetRepoTags()) != 2 {
		t.Fatalf("second tag: %v", img)
	}
	e.remove(t, ref)
	for _, r := range []string{ref, other, id} {
		if img := e.status(t, r); img != nil {
			t.Errorf("after RemoveImage: ImageStatus %s still finds %v", r, img.GetRepoTags())
		}
	}
	if img := findCRIImage(e.list(t, ""), id); img != nil {
		t.Errorf("after RemoveImage: listed %v", img)
	}
	// Idempotent.
	e.remove(t, ref)
	e.remove(t, id)

	// Pull again and remove by id.
	if got := e.pull(t, ref); got != id {
		t.Fatalf("second pull gave %s, want %s", got, id)
	}
	e.remove(t, id)
	if img := e.status(t, ref); img != nil {
		t.Errorf("after RemoveImage by id: still there")
	}

	// Resolve of a missing image fails clearly.
	_, err = e.svc.Resolve(imageTestCtx(t), ref)
	if !errors.Is(err, cri.ErrNotFound) || !strings.Contains(err.Error(), ref) {
		t.Errorf("Resolve of a missing image: %v, want a not-found error naming it", err)
	}
}

func TestImageUsers(t *testing.T) {
	e := newImageEnv(t, nil)
	for _, c := range []struct {
		user     string
		uid      int64
		hasUID   bool
		username string
	}{
		{"", 0, false, ""},
		{"1003:1004", 1003, true, ""},
		{"www-data", 0, false, "www-data"},
		{"www-data:1004", 0, false, "www-data"},
	} {
		tag := "u" + strings.NewReplacer(":", "-", "-", "").Replace(c.user)
		if c.user == "" {
			tag = "root"
		}
		e.push(t, "test/users-"+e.suffix, tag, c.user)
		ref := e.reg + "/test/users-" + e.suffix + ":" + tag
		id := e.pull(t, ref)
		for _, img := range []*runtime.Image{e.status(t, ref), findCRIImage(e.list(t, ""), id)} {
			if img == nil {
				t.Fatalf("user %q: image missing", c.user)
			}
			if (img.GetUid() != nil) != c.hasUID || img.GetUid().GetValue() != c.uid || img.GetUsername() != c.username {
				t.Errorf("user %q: uid %v username %q, want %d (set %v) %q", c.user, img.GetUid(), img.GetUsername(), c.uid, c.hasUID, c.username)
			}
		}
	}
}

func TestImagePullThroughMirror(t *testing.T) {
	e := newImageEnv(t, criimages.Mirrors{
		"registry.k8s.io": {"http://REGISTRY"},
		"gcr.io":          {"REGISTRY/gcr"},
	})
	path := "e2e-test-images/xyz-" + e.suffix
	dg := e.push(t, path, "1", "")
	want := "registry.k8s.io/" + path + ":1"

	id := e.pull(t, want)
	img := e.status(t, want)
	if img == nil || img.GetId() != id {
		t.Fatalf("ImageStatus %s after a mirror pull: %v", want, img)
	}
	if !slices.Equal(img.GetRepoTags(), []string{want}) {
		t.Errorf("repo tags %q, want only %q", img.GetRepoTags(), want)
	}
	for _, d := range img.GetRepoDigests() {
		if strings.HasPrefix(d, e.reg) {
			t.Errorf("repo digest %q of the mirror reported", d)
		}
	}
	mirrorName := e.reg + "/" + path + ":1"
	if _, err := e.d.ImageInspect(imageTestCtx(t), mirrorName); !dockerapi.IsNotFound(err) {
		t.Errorf("the engine still has the mirror's name %s: %v", mirrorName, err)
	}
	ei, err := e.d.ImageInspect(imageTestCtx(t), want)
	if err != nil || ei.ID != id {
		t.Fatalf("the engine lacks the requested name %s: %v", want, err)
	}
	if l := findCRIImage(e.list(t, ""), id); l == nil || !slices.Equal(l.GetRepoTags(), []string{want}) {
		t.Errorf("ListImages: %v", l)
	}

	// A mirror with a path prefix, another registry.
	gpath := "k8s-staging-cri-tools/test-image-" + e.suffix
	e.push(t, "gcr/"+gpath, "latest", "")
	gwant := "gcr.io/" + gpath + ":latest"
	gid := e.pull(t, "gcr.io/"+gpath)
	if img := e.status(t, gwant); img == nil || img.GetId() != gid || !slices.Equal(img.GetRepoTags(), []string{gwant}) {
		t.Errorf("prefixed mirror: %v", img)
	}

	// By digest: the engine keeps the mirror's digest name, and the
	// requested digest reference finds the image.
	e.remove(t, want)
	dref := "registry.k8s.io/" + path + "@" + dg
	did := e.pull(t, dref)
	if did != id {
		t.Errorf("digest pull: id %s, want %s", did, id)
	}
	img = e.status(t, dref)
	if img == nil || img.GetId() != id {
		t.Fatalf("ImageStatus %s after a digest pull through a mirror: %v", dref, img)
	}
	if len(img.GetRepoTags()) != 0 {
		t.Errorf("digest pull: repo tags %q, want none", img.GetRepoTags())
	}
	if imgs := e.list(t, dref); len(imgs) != 1 || imgs[0].GetId() != id {
		t.Errorf("ListImages by the digest reference: %v", imgs)
	}
	if ri, err := e.svc.Resolve(imageTestCtx(t), dref); err != nil || ri.ID != id {
		t.Errorf("Resolve %s: %+v %v", dref, ri, err)
	}
	e.remove(t, dref)
	if img := e.status(t, id); img != nil {
		t.Errorf("RemoveImage %s left %v", dref, img)
	}

	// A tag that no endpoint has: a clear error naming the image.
	_, err = e.cli.PullImage(imageTestCtx(t), &runtime.PullImageRequest{Image: &runtime.ImageSpec{Image: "registry.k8s.io/" + path + ":missing"}})
	if c := status.Code(err); c != codes.NotFound && c != codes.Unknown {
		t.Errorf("pull of a missing tag through a mirror: %v, want NotFound or Unknown", err)
	} else if !strings.Contains(err.Error(), "registry.k8s.io/"+path+":missing") || !strings.Contains(err.Error(), "mirror "+e.reg) {
		t.Errorf("pull of a missing tag through a mirror: %q should name the image and the mirror", err)
	}
}

func TestImageRequestErrors(t *testing.T) {
	e := newImageEnv(t, nil)
	ctx := imageTestCtx(t)

	_, err := e.cli.PullImage(ctx, &runtime.PullImageRequest{Image: &runtime.ImageSpec{Image: e.reg + "/test/none-" + e.suffix + ":v1"}})
	if c := status.Code(err); c != codes.NotFound && c != codes.Unknown {
		t.Errorf("pull of a missing image: %v, want NotFound or Unknown", err)
	} else if !strings.Contains(err.Error(), "test/none-"+e.suffix) {
		t.Errorf("pull of a missing image: %q does not name it", err)
	}

	for _, bad := range []string{"Not//Valid", "UPPER/case:1", "a:b:c", "sha256:" + strings.Repeat("a", 64)} {
		_, err := e.cli.PullImage(ctx, &runtime.PullImageRequest{Image: &runtime.ImageSpec{Image: bad}})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("PullImage %q: %v, want InvalidArgument", bad, err)
		}
	}
	for _, bad := range []string{"", "Not//Valid"} {
		_, err := e.cli.ImageStatus(ctx, &runtime.ImageStatusRequest{Image: &runtime.ImageSpec{Image: bad}})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("ImageStatus %q: %v, want InvalidArgument", bad, err)
		}
		_, err = e.cli.RemoveImage(ctx, &runtime.RemoveImageRequest{Image: &runtime.ImageSpec{Image: bad}})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("RemoveImage %q: %v, want InvalidArgument", bad, err)
		}
	}
	if _, err := e.svc.Resolve(ctx, "Not//Valid"); status.Code(cri.GRPCError(err)) != codes.InvalidArgument {
		t.Errorf("Resolve of a bad reference: %v", err)
	}

	// Missing: no image and no error; removal succeeds.
	missing := "docker.io/cri-compose-test/none-" + e.suffix + ":v1"
	resp, err := e.cli.ImageStatus(ctx, &runtime.ImageStatusRequest{Image: &runtime.ImageSpec{Image: missing}})
	if err != nil || resp.GetImage() != nil {
		t.Errorf("ImageStatus of a missing image: %v, %v", resp, err)
	}
	e.remove(t, missing)
	e.remove(t, "sha256:"+strings.Repeat("0", 64))

	// A deadline ends the pull with DeadlineExceeded (critest checks it).
	tctx, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	_, err = e.cli.PullImage(tctx, &runtime.PullImageRequest{Image: &runtime.ImageSpec{Image: e.reg + "/test/none:v1"}})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("PullImage past its deadline: %v, want DeadlineExceeded", err)
	}
}

func TestImageFsInfo(t *testing.T) {
	e := newImageEnv(t, nil)
	e.push(t, "test/fs-"+e.suffix, "v1", "")
	e.pull(t, e.reg+"/test/fs-"+e.suffix+":v1")

	resp, err := e.cli.ImageFsInfo(imageTestCtx(t), &runtime.ImageFsInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	info, err := e.d.Info(imageTestCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	for what, fss := range map[string][]*runtime.FilesystemUsage{"image": resp.GetImageFilesystems(), "container": resp.GetContainerFilesystems()} {
		if len(fss) != 1 {
			t.Fatalf("%s filesystems: %d, want 1", what, len(fss))
		}
		fs := fss[0]
		if want := filepath.Join(info.DockerRootDir, info.Driver); fs.GetFsId().GetMountpoint() != want {
			t.Errorf("%s mountpoint %q, want %q", what, fs.GetFsId().GetMountpoint(), want)
		}
		if fs.GetUsedBytes().GetValue() == 0 {
			t.Errorf("%s used bytes 0", what)
		}
		if ts := time.Unix(0, fs.GetTimestamp()); time.Since(ts).Abs() > time.Minute {
			t.Errorf("%s timestamp %v is not now (nanoseconds?)", what, ts)
		}
	}
}

func TestImageStream(t *testing.T) {
	e := newImageEnv(t, nil)
	e.push(t, "test/stream-"+e.suffix, "v1", "")
	id := e.pull(t, e.reg+"/test/stream-"+e.suffix+":v1")
	st, err := e.cli.StreamImages(imageTestCtx(t), &runtime.StreamImagesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var all []*runtime.Image
	for {
		m, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, m.GetImages()...)
	}
	if findCRIImage(all, id) == nil {
		t.Errorf("StreamImages lacks %s", id)
	}
}
