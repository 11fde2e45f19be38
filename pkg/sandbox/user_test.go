package sandbox

import (
	"errors"
	"slices"
	"testing"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// As in cri-tools' test-image-predefined-group: default-user (1000) is a
// member of group-defined-in-image (50000).
var testUsers = ImageUsers{
	Passwd: []byte("root:x:0:0:root:/root:/bin/sh\nwww-data:x:33:33:www-data:/var/www:/bin/false\n" +
		"default-user:x:1000:1000::/home/default-user:/bin/sh\n# comment\nbroken:line\n"),
	Group: []byte("root:x:0:\nwww-data:x:33:\ndefault-user:x:1000:default-user\n" +
		"group-defined-in-image:x:50000:default-user,www-data\nother:x:60000:someone\n"),
}

func TestResolveUser(t *testing.T) {
	i64 := func(v int64) *runtime.Int64Value { return &runtime.Int64Value{Value: v} }
	for _, tc := range []struct {
		name      string
		sc        *runtime.LinuxContainerSecurityContext
		imageUser string
		files     ImageUsers
		want      Identity
		wantErr   bool
	}{
		{name: "nothing: root", want: Identity{0, 0, []int64{0}}},
		{name: "image user by name", imageUser: "www-data", want: Identity{33, 33, []int64{33, 50000}}},
		{name: "image user and group", imageUser: "1003:1004", want: Identity{1003, 1004, []int64{1004}}},
		{name: "image user, group by name", imageUser: "www-data:other", want: Identity{33, 60000, []int64{50000, 60000}}},
		{name: "merge (the default)", sc: &runtime.LinuxContainerSecurityContext{RunAsUser: i64(1000), SupplementalGroups: []int64{1234}},
			want: Identity{1000, 1000, []int64{1000, 1234, 50000}}},
		{name: "strict", sc: &runtime.LinuxContainerSecurityContext{RunAsUser: i64(1000), SupplementalGroups: []int64{1234},
			SupplementalGroupsPolicy: runtime.SupplementalGroupsPolicy_Strict},
			want: Identity{1000, 1000, []int64{1000, 1234}}},
		{name: "run_as_user overrides the image's user and group", imageUser: "www-data:other",
			sc: &runtime.LinuxContainerSecurityContext{RunAsUser: i64(1000)}, want: Identity{1000, 1000, []int64{1000, 50000}}},
		{name: "run_as_group", sc: &runtime.LinuxContainerSecurityContext{RunAsUser: i64(1000), RunAsGroup: i64(2000)},
			want: Identity{1000, 2000, []int64{2000, 50000}}},
		{name: "run_as_username", sc: &runtime.LinuxContainerSecurityContext{RunAsUsername: "default-user"},
			want: Identity{1000, 1000, []int64{1000, 50000}}},
		{name: "uid not in passwd", sc: &runtime.LinuxContainerSecurityContext{RunAsUser: i64(4321)}, want: Identity{4321, 0, []int64{0}}},
		{name: "no passwd at all", sc: &runtime.LinuxContainerSecurityContext{RunAsUser: i64(7), SupplementalGroups: []int64{9, 9}},
			files: ImageUsers{}, want: Identity{7, 0, []int64{0, 9}}},
		{name: "unknown name", sc: &runtime.LinuxContainerSecurityContext{RunAsUsername: "nobody-here"}, wantErr: true},
		{name: "unknown image group", imageUser: "www-data:nogroup", wantErr: true},
		{name: "run_as_group alone", sc: &runtime.LinuxContainerSecurityContext{RunAsGroup: i64(5)}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := tc.files
			if files.Passwd == nil && tc.name != "no passwd at all" {
				files = testUsers
			}
			got, err := ResolveUser(tc.sc, tc.imageUser, files)
			if tc.wantErr {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("got %+v, %v; want an invalid argument", got, err)
				}
				return
			}
			if err != nil || got.UID != tc.want.UID || got.GID != tc.want.GID || !slices.Equal(got.Groups, tc.want.Groups) {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
			back, ok := ParseIdentity(got.String())
			if !ok || back.UID != got.UID || back.GID != got.GID || !slices.Equal(back.Groups, got.Groups) {
				t.Errorf("label %q reads back as %+v", got.String(), back)
			}
			user, groups := got.engineUser()
			if want := got.String()[:len(user)]; user != want {
				t.Errorf("engine user %q, want %q", user, want)
			}
			if len(groups) != len(got.Groups) {
				t.Errorf("engine groups %v", groups)
			}
		})
	}
}

func TestContainerSpecUser(t *testing.T) {
	// With a resolved identity the engine gets numbers only, and the label.
	in := ContainerInput{SandboxID: "sb", Sandbox: &runtime.PodSandboxConfig{Metadata: &runtime.PodSandboxMetadata{Name: "p", Namespace: "n", Uid: "u"}},
		Config: &runtime.ContainerConfig{Metadata: &runtime.ContainerMetadata{Name: "c"}, Image: &runtime.ImageSpec{Image: "busybox"},
			Linux: &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{RunAsUsername: "default-user"}}},
		User: &Identity{UID: 1000, GID: 1000, Groups: []int64{1000, 50000}}}
	spec, err := ContainerSpec(in, Host{})
	if err != nil {
		t.Fatal(err)
	}
	if spec.Config.User != "1000:1000" || !slices.Equal(spec.HostConfig.GroupAdd, []string{"1000", "50000"}) ||
		spec.Config.Labels[LabelUser] != "1000:1000:1000,50000" {
		t.Errorf("user %q groups %v label %q", spec.Config.User, spec.HostConfig.GroupAdd, spec.Config.Labels[LabelUser])
	}
	obj, _, err := ParseLabels(spec.Config.Labels)
	if err != nil || obj.User != "1000:1000:1000,50000" {
		t.Errorf("labels read back: %+v %v", obj, err)
	}
}

func TestImageMountSpec(t *testing.T) {
	base := func(m *runtime.Mount) ContainerInput {
		return ContainerInput{SandboxID: "sb", Sandbox: &runtime.PodSandboxConfig{Metadata: &runtime.PodSandboxMetadata{Name: "p", Namespace: "n", Uid: "u"}},
			Config: &runtime.ContainerConfig{Metadata: &runtime.ContainerMetadata{Name: "c"}, Image: &runtime.ImageSpec{Image: "busybox"},
				Mounts: []*runtime.Mount{m}}}
	}
	img := &runtime.ImageSpec{Image: "sha256:abc"}
	in := base(&runtime.Mount{ContainerPath: "/mnt/image", Readonly: true, Image: img})
	if _, err := ContainerSpec(in, Host{}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("an image mount without a copy: %v, want unsupported", err)
	}
	in.ImageMounts = map[int]string{0: "/state/image-volumes/abc/rootfs/etc"}
	spec, err := ContainerSpec(in, Host{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "/state/image-volumes/abc/rootfs/etc:/mnt/image:ro,rprivate"; !slices.Contains(spec.HostConfig.Binds, want) {
		t.Errorf("binds %v, want %s", spec.HostConfig.Binds, want)
	}
	in = base(&runtime.Mount{ContainerPath: "/mnt/image", Readonly: false, Image: img})
	in.ImageMounts = map[int]string{0: "/x"}
	if _, err := ContainerSpec(in, Host{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a writable image mount: %v, want invalid", err)
	}
}
