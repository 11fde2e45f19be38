package vk

import (
	"os"

	v1 "k8s.io/api/core/v1"
)

// Ownership of the files of configMap, secret, downwardAPI and projected
// volumes, as kubelet sets it (pkg/volume/volume_linux.go,
// SetVolumeOwnership, and pkg/volume/projected):
//
//   - with the pod's fsGroup, every file and folder of the volume gets
//     that group, files gain r for the group (mode | 0440, the mask of a
//     read-only volume) and folders r-x and setgid (| 02550);
//   - a serviceAccountToken file is 0600 instead of the volume's
//     defaultMode when fsGroup is set (it then becomes 0640) or when all
//     the pod's containers run as one user (fsUser), who then owns it.
//
// Without fsGroup nor a common user the files are root's with the modes
// the pod asked for.

const (
	fsGroupFileBits = 0o440
	fsGroupDirBits  = os.ModeSetgid | 0o550
)

// podFSGroup is the pod's fsGroup, or nil.
func podFSGroup(pod *v1.Pod) *int64 {
	if sc := pod.Spec.SecurityContext; sc != nil {
		return sc.FSGroup
	}
	return nil
}

// podFSUser is kubelet's FsUserFrom: the user every container of the pod
// runs as (its runAsUser, or the pod's), or nil when one has none or two
// differ.
func podFSUser(pod *v1.Pod) *int64 {
	var user *int64
	var psc *int64
	if sc := pod.Spec.SecurityContext; sc != nil {
		psc = sc.RunAsUser
	}
	same := func(sc *v1.SecurityContext) bool {
		u := psc
		if sc != nil && sc.RunAsUser != nil {
			u = sc.RunAsUser
		}
		if u == nil || (user != nil && *user != *u) {
			return false
		}
		user = u
		return true
	}
	for _, c := range pod.Spec.InitContainers {
		if !same(c.SecurityContext) {
			return nil
		}
	}
	for _, c := range pod.Spec.Containers {
		if !same(c.SecurityContext) {
			return nil
		}
	}
	for _, c := range pod.Spec.EphemeralContainers {
		if !same(c.SecurityContext) {
			return nil
		}
	}
	return user
}

// withFSGroup gives files the fsGroup's group and read bits (a copy; fs
// itself unchanged). Without fsGroup, files are returned as they are.
func withFSGroup(fs map[string]file, fsGroup *int64) map[string]file {
	if fsGroup == nil {
		return fs
	}
	out := make(map[string]file, len(fs))
	for p, f := range fs {
		f.mode |= fsGroupFileBits
		f.gid = fsGroup
		out[p] = f
	}
	return out
}

// fsGroupDir gives an emptyDir's folder to the pod's fsGroup, as kubelet's
// SetVolumeOwnership does to a writable volume: the group, rw for it
// (mode | 0660), x and setgid for a folder, so that every container user
// of the group writes there and what it makes is the group's. An emptyDir
// is set up empty, so its folder is all there is to change.
func fsGroupDir(dir string, fsGroup *int64) error {
	if fsGroup == nil {
		return nil
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if err := os.Lchown(dir, -1, int(*fsGroup)); err != nil {
		return err
	}
	return os.Chmod(dir, fi.Mode()&(os.ModePerm|os.ModeSticky|os.ModeSetgid|os.ModeSetuid)|os.ModeSetgid|0o770)
}

// tokenFile is a serviceAccountToken file of a projected volume whose
// defaultMode is dflt.
func tokenFile(pod *v1.Pod, tok []byte, dflt *int32) file {
	f := file{data: tok, mode: fileMode(nil, dflt, 0o644), uid: podFSUser(pod)}
	if f.uid != nil || podFSGroup(pod) != nil {
		f.mode = 0o600
	}
	return f
}
