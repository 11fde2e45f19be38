package vk

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

// A pod's files live under <state-dir>/pods/<uid>/: volumes/<plugin>/<name>
// for its volumes, containers/<name>/ for termination-message files.
// The runtime bind-mounts them, so the runtime must run on the same host
// (or see the same state dir at the same path). The pod's folders are
// closed to other users (0750, as kubelet's pods/<uid> and its volumes
// folders are): its volumes hold its secrets and tokens.

func podDir(stateDir string, uid types.UID) string {
	return filepath.Join(stateDir, "pods", string(uid))
}

// volume is one of a pod's volumes set up on the host.
type volume struct {
	hostPath string
	// readOnly: configMap, secret and downwardAPI volumes are always
	// mounted read-only, as kubelet does.
	readOnly bool
}

// file is one file of a configMap, secret, downwardAPI or projected
// volume: its content, its mode and, when set, its owner and group.
type file struct {
	data     []byte
	mode     os.FileMode
	uid, gid *int64
}

// objectSource reads the configMaps and secrets volumes and env refer to.
type objectSource interface {
	configMap(namespace, name string) (*v1.ConfigMap, error)
	secret(namespace, name string) (*v1.Secret, error)
}

// errNotFound wraps a missing configMap or secret (or key), which kubelet
// reports as the container's CreateContainerConfigError.
var errNotFound = errors.New("not found")

// setUpVolumes materialises every volume of pod under dir (its podDir) and
// returns them by name; mem mounts the tmpfs of secret, projected and
// downwardAPI volumes (nil: kept on disk). It is idempotent: a second call
// rewrites the configMap, secret and downwardAPI files only when their
// content changed.
func setUpVolumes(dir string, pod *v1.Pod, src objectSource, mem *memoryMedium) (map[string]volume, error) {
	for _, p := range []string{dir, filepath.Join(dir, "volumes")} {
		if err := closedDir(p, privateDirPerm); err != nil {
			return nil, err
		}
	}
	vols := make(map[string]volume, len(pod.Spec.Volumes))
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		vol, err := setUpVolume(dir, pod, v, src, mem)
		if err != nil {
			return nil, &volumeError{name: v.Name, err: err}
		}
		vols[v.Name] = vol
	}
	return vols, nil
}

// volumeError is a volume that could not be set up. The pod waits for it
// in ContainerCreating, and an event says which and why in kubelet's words
// (FailedMount, "MountVolume.SetUp failed for volume ...").
type volumeError struct {
	name string
	err  error
}

func (e *volumeError) Error() string { return fmt.Sprintf("volume %q: %v", e.name, e.err) }
func (e *volumeError) Unwrap() error { return e.err }

// eventMessage is kubelet's FailedMount message for it.
func (e *volumeError) eventMessage() string {
	return fmt.Sprintf("MountVolume.SetUp failed for volume %q : %v", e.name, e.err)
}

func setUpVolume(dir string, pod *v1.Pod, v *v1.Volume, src objectSource, mem *memoryMedium) (volume, error) {
	path := func(plugin string) (string, error) {
		p := filepath.Join(dir, "volumes", plugin)
		return filepath.Join(p, v.Name), closedDir(p, privateDirPerm)
	}
	fsGroup := podFSGroup(pod)
	// A volume of files written by vk-cri: on disk (configMap, as kubelet
	// keeps it) or on its own tmpfs (the others).
	files := func(plugin string, inMemory bool, fs map[string]file, err error) (volume, error) {
		if err != nil {
			return volume{}, err
		}
		p, err := path(plugin)
		if err != nil {
			return volume{}, err
		}
		if inMemory {
			onTmpfs, err := mem.setUp(p)
			if err != nil {
				return volume{}, err
			}
			if !onTmpfs {
				// On disk: the folder that holds such volumes is
				// root's alone.
				if err := closedDir(filepath.Dir(p), 0o700); err != nil {
					return volume{}, err
				}
			}
		}
		return volume{hostPath: p, readOnly: true}, writeAtomic(p, withFSGroup(fs, fsGroup), fsGroup)
	}
	switch {
	case v.EmptyDir != nil && v.EmptyDir.Medium == v1.StorageMediumMemory:
		p, err := path("empty-dir")
		if err != nil {
			return volume{}, err
		}
		if err := setUpMemoryDir(p, pod, v.EmptyDir, allocatableOf(src)); err != nil {
			return volume{}, err
		}
		return volume{hostPath: p}, fsGroupDir(p, podFSGroup(pod))
	case v.EmptyDir != nil:
		p, err := path("empty-dir")
		if err != nil {
			return volume{}, err
		}
		if err := os.MkdirAll(p, 0o777); err != nil {
			return volume{}, err
		}
		if err := os.Chmod(p, 0o777); err != nil { // as kubelet: writable by any user
			return volume{}, err
		}
		return volume{hostPath: p}, fsGroupDir(p, podFSGroup(pod))
	case v.HostPath != nil:
		return volume{hostPath: v.HostPath.Path}, checkHostPath(v.HostPath)
	case v.ConfigMap != nil:
		fs, err := configMapFiles(pod.Namespace, v.ConfigMap, src)
		return files("configmap", false, fs, err)
	case v.Secret != nil:
		fs, err := secretFiles(pod.Namespace, v.Secret, src)
		return files("secret", true, fs, err)
	case v.DownwardAPI != nil:
		fs, err := downwardAPIFiles(pod, v.DownwardAPI, allocatableOf(src))
		return files("downward-api", true, fs, err)
	case v.Projected != nil:
		fs, err := projectedFiles(pod, v.Projected, src)
		return files("projected", true, fs, err)
	}
	// Claims and CSI need an attach/mount path (a CSI node plugin, the
	// attach-detach controller's view of this node) that a virtual node
	// has not got; say so rather than run the pod without its data.
	return volume{}, fmt.Errorf("%s volumes are not supported by vk-cri (configMap, secret, emptyDir, projected, downwardAPI and hostPath are)", volumeKind(v))
}

// volumeKind names v's source as the API spells it.
func volumeKind(v *v1.Volume) string {
	switch {
	case v.PersistentVolumeClaim != nil:
		return "persistentVolumeClaim"
	case v.Ephemeral != nil:
		return "ephemeral"
	case v.CSI != nil:
		return "csi"
	case v.NFS != nil:
		return "nfs"
	case v.Image != nil:
		return "image"
	case v.ISCSI != nil:
		return "iscsi"
	}
	return "this kind of"
}

func fileMode(item *int32, dflt *int32, fallback os.FileMode) os.FileMode {
	switch {
	case item != nil:
		return os.FileMode(*item) & os.ModePerm
	case dflt != nil:
		return os.FileMode(*dflt) & os.ModePerm
	}
	return fallback
}

// keyFiles projects data (key → content) into files: every key, or only the
// items, each at its path. A listed key that is missing is an error unless
// optional.
func keyFiles(data map[string][]byte, items []v1.KeyToPath, defaultMode *int32, optional bool, what string) (map[string]file, error) {
	files := make(map[string]file)
	if len(items) == 0 {
		for k, d := range data {
			files[k] = file{data: d, mode: fileMode(nil, defaultMode, 0o644)}
		}
		return files, nil
	}
	for _, it := range items {
		d, ok := data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return nil, fmt.Errorf("%w: key %q in %s", errNotFound, it.Key, what)
		}
		files[it.Path] = file{data: d, mode: fileMode(it.Mode, defaultMode, 0o644)}
	}
	return files, nil
}

func configMapFiles(ns string, s *v1.ConfigMapVolumeSource, src objectSource) (map[string]file, error) {
	optional := s.Optional != nil && *s.Optional
	cm, err := src.configMap(ns, s.Name)
	if errors.Is(err, errNotFound) && optional {
		return map[string]file{}, nil
	}
	if err != nil {
		return nil, err
	}
	data := make(map[string][]byte, len(cm.Data)+len(cm.BinaryData))
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return keyFiles(data, s.Items, s.DefaultMode, optional, "configMap "+ns+"/"+s.Name)
}

func secretFiles(ns string, s *v1.SecretVolumeSource, src objectSource) (map[string]file, error) {
	optional := s.Optional != nil && *s.Optional
	sec, err := src.secret(ns, s.SecretName)
	if errors.Is(err, errNotFound) && optional {
		return map[string]file{}, nil
	}
	if err != nil {
		return nil, err
	}
	return keyFiles(sec.Data, s.Items, s.DefaultMode, optional, "secret "+ns+"/"+s.SecretName)
}

func downwardAPIFiles(pod *v1.Pod, s *v1.DownwardAPIVolumeSource, alloc v1.ResourceList) (map[string]file, error) {
	files := make(map[string]file, len(s.Items))
	for _, it := range s.Items {
		var val string
		switch {
		case it.FieldRef != nil:
			v, err := podFieldValue(pod, it.FieldRef.FieldPath, "", nil)
			if err != nil {
				return nil, err
			}
			val = v
		case it.ResourceFieldRef != nil:
			v, err := resourceFieldValue(pod, "", it.ResourceFieldRef, alloc)
			if err != nil {
				return nil, err
			}
			val = v
		default:
			return nil, fmt.Errorf("downwardAPI item %q has no fieldRef nor resourceFieldRef", it.Path)
		}
		files[it.Path] = file{data: []byte(val), mode: fileMode(it.Mode, s.DefaultMode, 0o644)}
	}
	return files, nil
}

// formatMap renders labels or annotations as downwardAPI files do: one
// key="value" line per entry, sorted.
func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%s=%q", k, m[k])
	}
	return b.String()
}

// resourceFieldValue is a container's resource (limits.cpu,
// requests.memory, limits.hugepages-2Mi …) in the divisor's units, rounded
// up, as kubelet's fieldpath.ExtractContainerResourceValue reports it. An
// unset cpu, memory or ephemeral-storage limit reads as the node's
// allocatable (alloc), as kubelet defaults it for the downward API.
func resourceFieldValue(pod *v1.Pod, containerName string, ref *v1.ResourceFieldSelector, alloc v1.ResourceList) (string, error) {
	name := ref.ContainerName
	if name == "" {
		name = containerName
	}
	var c *v1.Container
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			c = &pod.Spec.Containers[i]
		}
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			c = &pod.Spec.InitContainers[i]
		}
	}
	if c == nil {
		return "", fmt.Errorf("resourceFieldRef: no container %q", name)
	}
	kind, res, ok := strings.Cut(ref.Resource, ".")
	rn := v1.ResourceName(res)
	switch {
	case !ok:
	case rn == v1.ResourceCPU || rn == v1.ResourceMemory || rn == v1.ResourceEphemeralStorage:
	case strings.HasPrefix(res, v1.ResourceHugePagesPrefix):
	default:
		ok = false
	}
	var q resource.Quantity
	switch {
	case ok && kind == "limits":
		var set bool
		if q, set = c.Resources.Limits[rn]; !set && !strings.HasPrefix(res, v1.ResourceHugePagesPrefix) {
			q = alloc[rn]
		}
	case ok && kind == "requests":
		q = c.Resources.Requests[rn]
	default:
		return "", fmt.Errorf("resourceFieldRef: unsupported resource %q", ref.Resource)
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	if rn == v1.ResourceCPU {
		m, d := q.MilliValue(), divisor.MilliValue()
		return fmt.Sprint((m + d - 1) / d), nil
	}
	v, d := q.Value(), divisor.Value()
	return fmt.Sprint((v + d - 1) / d), nil
}

func checkHostPath(h *v1.HostPathVolumeSource) error {
	t := v1.HostPathUnset
	if h.Type != nil {
		t = *h.Type
	}
	fi, err := os.Stat(h.Path)
	switch t {
	case v1.HostPathUnset:
		return nil
	case v1.HostPathDirectoryOrCreate:
		if errors.Is(err, os.ErrNotExist) {
			return os.MkdirAll(h.Path, 0o755)
		}
	case v1.HostPathFileOrCreate:
		if errors.Is(err, os.ErrNotExist) {
			if err := os.MkdirAll(filepath.Dir(h.Path), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(h.Path, os.O_CREATE|os.O_RDONLY, 0o644)
			if err != nil {
				return err
			}
			return f.Close()
		}
	}
	if err != nil {
		return fmt.Errorf("hostPath %s: %w", h.Path, err)
	}
	want := func(ok bool, what string) error {
		if !ok {
			return fmt.Errorf("hostPath %s is not a %s", h.Path, what)
		}
		return nil
	}
	m := fi.Mode()
	switch t {
	case v1.HostPathDirectory, v1.HostPathDirectoryOrCreate:
		return want(m.IsDir(), "directory")
	case v1.HostPathFile, v1.HostPathFileOrCreate:
		return want(m.IsRegular(), "file")
	case v1.HostPathSocket:
		return want(m&os.ModeSocket != 0, "socket")
	case v1.HostPathCharDev:
		return want(m&os.ModeDevice != 0 && m&os.ModeCharDevice != 0, "character device")
	case v1.HostPathBlockDev:
		return want(m&os.ModeDevice != 0 && m&os.ModeCharDevice == 0, "block device")
	}
	return nil
}

// removePodDir deletes what setUpVolumes and the workers wrote for a pod:
// the tmpfs of its volumes (and anything else mounted below) are
// unmounted first; a mount point still busy (EBUSY) is reported.
func removePodDir(dir string) error {
	if err := unmountAll(dir); err != nil {
		return err
	}
	err := os.RemoveAll(dir)
	if errors.Is(err, syscall.EBUSY) {
		return fmt.Errorf("remove %s: still mounted: %w", dir, err)
	}
	return err
}
