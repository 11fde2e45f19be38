package vk

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

// A pod's files live under <state-dir>/pods/<uid>/: volumes/<plugin>/<name>
// for its volumes, containers/<name>/ for termination-message files.
// The runtime bind-mounts them, so the runtime must run on the same host
// (or see the same state dir at the same path).

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

// file is one file of a configMap, secret or downwardAPI volume.
type file struct {
	data []byte
	mode os.FileMode
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
// returns them by name. It is idempotent: a second call rewrites the
// configMap, secret and downwardAPI files only when their content changed.
func setUpVolumes(dir string, pod *v1.Pod, src objectSource) (map[string]volume, error) {
	vols := make(map[string]volume, len(pod.Spec.Volumes))
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		vol, err := setUpVolume(dir, pod, v, src)
		if err != nil {
			return nil, fmt.Errorf("volume %q: %w", v.Name, err)
		}
		vols[v.Name] = vol
	}
	return vols, nil
}

func setUpVolume(dir string, pod *v1.Pod, v *v1.Volume, src objectSource) (volume, error) {
	path := func(plugin string) string { return filepath.Join(dir, "volumes", plugin, v.Name) }
	switch {
	case v.EmptyDir != nil:
		// TODO(issue 7): medium Memory as a tmpfs. It needs mount
		// rights on the runtime's host; a disk folder keeps such pods
		// working meanwhile.
		p := path("empty-dir")
		if err := os.MkdirAll(p, 0o777); err != nil {
			return volume{}, err
		}
		return volume{hostPath: p}, os.Chmod(p, 0o777) // as kubelet: writable by any user
	case v.HostPath != nil:
		return volume{hostPath: v.HostPath.Path}, checkHostPath(v.HostPath)
	case v.ConfigMap != nil:
		files, err := configMapFiles(pod.Namespace, v.ConfigMap, src)
		if err != nil {
			return volume{}, err
		}
		p := path("configmap")
		return volume{hostPath: p, readOnly: true}, writeAtomic(p, files)
	case v.Secret != nil:
		files, err := secretFiles(pod.Namespace, v.Secret, src)
		if err != nil {
			return volume{}, err
		}
		p := path("secret")
		return volume{hostPath: p, readOnly: true}, writeAtomic(p, files)
	case v.DownwardAPI != nil:
		files, err := downwardAPIFiles(pod, v.DownwardAPI)
		if err != nil {
			return volume{}, err
		}
		p := path("downward-api")
		return volume{hostPath: p, readOnly: true}, writeAtomic(p, files)
	}
	// TODO(issue 7): projected, persistentVolumeClaim, ephemeral, csi…
	return volume{}, fmt.Errorf("volume type not supported by vk-cri yet")
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

func downwardAPIFiles(pod *v1.Pod, s *v1.DownwardAPIVolumeSource) (map[string]file, error) {
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
			v, err := resourceFieldValue(pod, "", it.ResourceFieldRef)
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

// resourceFieldValue is a container's resource (limits.cpu, requests.memory
// …) in the divisor's units, rounded up, as kubelet reports it. An unset
// limit reads as the node's allocatable in kubelet; vk-cri reports 0 until
// it knows the node here.
func resourceFieldValue(pod *v1.Pod, containerName string, ref *v1.ResourceFieldSelector) (string, error) {
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
	var q resource.Quantity
	switch ref.Resource {
	case "limits.cpu":
		q = c.Resources.Limits[v1.ResourceCPU]
	case "limits.memory":
		q = c.Resources.Limits[v1.ResourceMemory]
	case "limits.ephemeral-storage":
		q = c.Resources.Limits[v1.ResourceEphemeralStorage]
	case "requests.cpu":
		q = c.Resources.Requests[v1.ResourceCPU]
	case "requests.memory":
		q = c.Resources.Requests[v1.ResourceMemory]
	case "requests.ephemeral-storage":
		q = c.Resources.Requests[v1.ResourceEphemeralStorage]
	default:
		return "", fmt.Errorf("resourceFieldRef: unsupported resource %q", ref.Resource)
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	if strings.HasSuffix(ref.Resource, "cpu") {
		m := q.MilliValue()
		d := divisor.MilliValue()
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

const dataDirName = "..data"

// writeAtomic makes dir hold exactly files (relative path → content), as
// kubelet's AtomicWriter does: the files are written into a fresh hidden
// folder, the ..data symlink is switched to it with one rename, and each
// top-level name is a symlink through ..data. A container that has dir
// mounted sees the old set or the new one, never a mix; nothing is written
// when the content is unchanged.
func writeAtomic(dir string, files map[string]file) error {
	for p := range files {
		if !filepath.IsLocal(p) || strings.HasPrefix(p, "..") {
			return fmt.Errorf("file path %q must be relative and stay inside the volume", p)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if sameContent(filepath.Join(dir, dataDirName), files) {
		return nil
	}
	ts, err := os.MkdirTemp(dir, ".."+time.Now().UTC().Format("2006_01_02_15_04_05.")) // like kubelet's
	if err != nil {
		return err
	}
	if err := os.Chmod(ts, 0o755); err != nil {
		return err
	}
	for p, f := range files {
		full := filepath.Join(ts, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, f.data, f.mode); err != nil {
			return err
		}
		if err := os.Chmod(full, f.mode); err != nil { // umask
			return err
		}
	}
	old, _ := os.Readlink(filepath.Join(dir, dataDirName))
	tmpLink := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmpLink)
	if err := os.Symlink(filepath.Base(ts), tmpLink); err != nil {
		return err
	}
	if err := os.Rename(tmpLink, filepath.Join(dir, dataDirName)); err != nil {
		return err
	}
	// Top-level names: add the new, drop the gone.
	top := map[string]bool{}
	for p := range files {
		top[strings.SplitN(filepath.ToSlash(p), "/", 2)[0]] = true
	}
	for name := range top {
		link := filepath.Join(dir, name)
		if target, err := os.Readlink(link); err == nil && target == filepath.Join(dataDirName, name) {
			continue
		}
		if err := os.Symlink(filepath.Join(dataDirName, name), link); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if n := e.Name(); !strings.HasPrefix(n, "..") && !top[n] {
			_ = os.Remove(filepath.Join(dir, n))
		}
	}
	if old != "" && old != filepath.Base(ts) {
		_ = os.RemoveAll(filepath.Join(dir, old))
	}
	return nil
}

// sameContent reports whether the folder data holds exactly files.
func sameContent(data string, files map[string]file) bool {
	n := 0
	err := filepath.WalkDir(data+"/", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(data, p)
		f, ok := files[rel]
		if !ok {
			return errors.New("extra")
		}
		fi, err := d.Info()
		if err != nil || fi.Mode().Perm() != f.mode.Perm() {
			return errors.New("mode")
		}
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(b, f.data) {
			return errors.New("content")
		}
		n++
		return nil
	})
	return err == nil && n == len(files)
}

// removePodDir deletes what setUpVolumes and the workers wrote for a pod.
// Nothing there is mounted on the host itself (the runtime's bind mounts
// end with the containers), so a plain RemoveAll is enough; a busy
// mount point (EBUSY) is reported.
func removePodDir(dir string) error {
	err := os.RemoveAll(dir)
	if errors.Is(err, syscall.EBUSY) {
		return fmt.Errorf("remove %s: still mounted: %w", dir, err)
	}
	return err
}
