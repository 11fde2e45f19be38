package vk

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// containerHash identifies a container's spec: a running container whose
// hash differs from its spec's is restarted (kubelet does the same when,
// say, the image of a running pod is changed).
func containerHash(c *v1.Container) string {
	b, _ := json.Marshal(c)
	h := fnv.New32a()
	h.Write(b)
	return strconv.FormatUint(uint64(h.Sum32()), 16)
}

// containerHashNoResources is containerHash without what an in-place
// resize changes: such a change restarts a container only when its
// resizePolicy says so (resize.go).
func containerHashNoResources(c *v1.Container) string {
	c = c.DeepCopy()
	c.Resources, c.ResizePolicy = v1.ResourceRequirements{}, nil
	return containerHash(c)
}

// containerLogPath is where the runtime writes a container's log, relative
// to the sandbox's log directory: <name>/<attempt>.log, as kubelet names it.
func containerLogPath(name string, attempt uint32) string {
	return filepath.Join(name, strconv.FormatUint(uint64(attempt), 10)+".log")
}

// startSpec is what makeContainerConfig needs besides the pod.
type startSpec struct {
	c        *v1.Container
	init     bool
	attempt  uint32
	imageRef string
	env      []*runtimeapi.KeyValue
	volumes  map[string]volume
	// termFile is the host file mounted at terminationMessagePath.
	termFile string
	// pidTarget: an ephemeral container's target (ephemeral.go).
	pidTarget string
	// hostsFile is the pod's hosts file, mounted at /etc/hosts ("": none).
	hostsFile string
	// oomScoreAdj is the container's OOM score adjustment (oomScoreAdj).
	oomScoreAdj int64
}

// makeContainerConfig is the CRI container for s.c, as kubelet builds it
// (generateContainerConfig).
func makeContainerConfig(pod *v1.Pod, s startSpec) (*runtimeapi.ContainerConfig, error) {
	c := s.c
	envMap := make(map[string]string, len(s.env))
	for _, kv := range s.env {
		envMap[kv.Key] = string(kv.Value)
	}
	expandAll := func(in []string) []string {
		if in == nil {
			return nil
		}
		out := make([]string, len(in))
		for i, v := range in {
			out[i] = expand(v, envMap)
		}
		return out
	}
	mounts, err := makeMounts(c, s.volumes, envMap)
	if err != nil {
		return nil, err
	}
	if s.hostsFile != "" && !mountsEtcHosts(c) {
		mounts = append(mounts, &runtimeapi.Mount{ContainerPath: etcHostsPath, HostPath: s.hostsFile})
	}
	if s.termFile != "" && c.TerminationMessagePath != "" {
		mounts = append(mounts, &runtimeapi.Mount{ContainerPath: c.TerminationMessagePath, HostPath: s.termFile})
	}
	grace := int64(30)
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		grace = *pod.Spec.TerminationGracePeriodSeconds
	}
	annotations := copyMap(pod.Annotations)
	annotations[annotationContainerHash] = containerHash(c)
	annotations[annotationContainerHashNoResources] = containerHashNoResources(c)
	annotations[annotationMemoryRequest] = strconv.FormatInt(c.Resources.Requests.Memory().Value(), 10)
	annotations[annotationRestartCount] = strconv.FormatUint(uint64(s.attempt), 10)
	annotations[annotationTerminationPath] = c.TerminationMessagePath
	annotations[annotationTerminationPolicy] = string(c.TerminationMessagePolicy)
	annotations[annotationPodGracePeriod] = strconv.FormatInt(grace, 10)
	if s.init {
		annotations[annotationContainerInitMarker] = "true"
	}
	cfg := &runtimeapi.ContainerConfig{
		Metadata:   &runtimeapi.ContainerMetadata{Name: c.Name, Attempt: s.attempt},
		Image:      &runtimeapi.ImageSpec{Image: s.imageRef, UserSpecifiedImage: c.Image},
		Command:    expandAll(c.Command),
		Args:       expandAll(c.Args),
		WorkingDir: c.WorkingDir,
		Envs:       s.env,
		Mounts:     mounts,
		Labels: map[string]string{
			labelPodName:       pod.Name,
			labelPodNamespace:  pod.Namespace,
			labelPodUID:        string(pod.UID),
			labelContainerName: c.Name,
		},
		Annotations: annotations,
		LogPath:     containerLogPath(c.Name, s.attempt),
		Stdin:       c.Stdin,
		StdinOnce:   c.StdinOnce,
		Tty:         c.TTY,
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources:       withOOMScoreAdj(linuxResources(c), s.oomScoreAdj),
			SecurityContext: containerSecurity(pod, c),
		},
	}
	targetNamespace(cfg.Linux.SecurityContext.NamespaceOptions, s.pidTarget)
	return cfg, nil
}

// makeMounts turns volumeMounts into CRI mounts of the host paths; env is
// the container's environment, which subPathExpr is expanded from.
func makeMounts(c *v1.Container, vols map[string]volume, env map[string]string) ([]*runtimeapi.Mount, error) {
	var mounts []*runtimeapi.Mount
	for _, m := range c.VolumeMounts {
		v, ok := vols[m.Name]
		if !ok {
			return nil, fmt.Errorf("volumeMount %q: no such volume", m.Name)
		}
		host := v.hostPath
		subPath := m.SubPath
		if m.SubPathExpr != "" {
			var err error
			if subPath, err = expandSubPathExpr(m.SubPathExpr, env); err != nil {
				return nil, err
			}
		}
		if subPath != "" {
			if err := checkSubPath(subPath); err != nil {
				return nil, err
			}
			root := host
			host = filepath.Join(host, subPath)
			if _, err := os.Lstat(host); os.IsNotExist(err) && !v.readOnly {
				if err := makeSubPath(root, subPath); err != nil {
					return nil, fmt.Errorf("failed to create subPath directory for volumeMount %q of container %q: %w", m.Name, c.Name, err)
				}
			}
		}
		mount := &runtimeapi.Mount{
			ContainerPath: m.MountPath,
			HostPath:      host,
			Readonly:      m.ReadOnly || v.readOnly,
		}
		if m.MountPropagation != nil {
			switch *m.MountPropagation {
			case v1.MountPropagationHostToContainer:
				mount.Propagation = runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER
			case v1.MountPropagationBidirectional:
				mount.Propagation = runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL
			}
		}
		mounts = append(mounts, mount)
	}
	return mounts, nil
}

// makeSubPath makes the missing folders of subPath under volume root
// with the root's own mode, set bits included, whatever the umask (as
// kubelet's SafeMakeDir): with fsGroup the root is group-writable and
// setgid, and so must the subPath be for the pod's group to write there.
// It does not follow a symbolic link on the way, which could lead out of
// the volume.
func makeSubPath(root, subPath string) error {
	fi, err := os.Stat(root)
	if err != nil {
		return err
	}
	mode := fi.Mode() & (os.ModePerm | os.ModeSetgid | os.ModeSetuid | os.ModeSticky)
	dir := root
	for _, name := range strings.Split(filepath.Clean(subPath), string(filepath.Separator)) {
		dir = filepath.Join(dir, name)
		fi, err := os.Lstat(dir)
		switch {
		case err == nil && fi.Mode()&os.ModeSymlink != 0:
			return fmt.Errorf("%s is a symbolic link", strings.TrimPrefix(dir, root+"/"))
		case err == nil:
			continue
		case !os.IsNotExist(err):
			return err
		}
		if err := os.Mkdir(dir, 0o700); err != nil {
			return err
		}
		if err := os.Chmod(dir, mode); err != nil {
			return err
		}
	}
	return nil
}

// expandSubPathExpr expands a volumeMount's subPathExpr from the
// container's environment as kubelet does: a variable that is unknown or
// empty expands to nothing and fails the mount, since the subPath would
// not be the one meant.
func expandSubPathExpr(expr string, env map[string]string) (string, error) {
	var missing []string
	out := expandFunc(expr, func(name string) string {
		v := env[name]
		if v == "" && !slices.Contains(missing, name) {
			missing = append(missing, name)
		}
		return v
	})
	if len(missing) > 0 {
		slices.Sort(missing)
		return "", fmt.Errorf("missing value for %s", strings.Join(missing, ", "))
	}
	return out, nil
}

// checkSubPath keeps a subPath inside its volume, with kubelet's checks and
// words: relative, and no ".." anywhere in it.
func checkSubPath(subPath string) error {
	if filepath.IsAbs(subPath) {
		return fmt.Errorf("error SubPath `%s` must not be an absolute path", subPath)
	}
	if slices.Contains(strings.Split(filepath.ToSlash(subPath), "/"), "..") {
		return fmt.Errorf("unable to provision SubPath `%s`: must not contain '..'", subPath)
	}
	return nil
}

// linuxResources maps requests and limits as kubelet does on cgroup v1
// and v2 alike: shares from the CPU request, quota from the CPU limit,
// memory limit as is.
func linuxResources(c *v1.Container) *runtimeapi.LinuxContainerResources {
	r := &runtimeapi.LinuxContainerResources{CpuShares: minShares}
	if q, ok := c.Resources.Requests[v1.ResourceCPU]; ok {
		r.CpuShares = milliCPUToShares(q.MilliValue())
	} else if q, ok := c.Resources.Limits[v1.ResourceCPU]; ok {
		r.CpuShares = milliCPUToShares(q.MilliValue())
	}
	if q, ok := c.Resources.Limits[v1.ResourceCPU]; ok {
		r.CpuPeriod = quotaPeriod
		r.CpuQuota = milliCPUToQuota(q.MilliValue())
	}
	if q, ok := c.Resources.Limits[v1.ResourceMemory]; ok {
		r.MemoryLimitInBytes = q.Value()
	}
	return r
}

// kubelet's CFS values: the fewest shares, the quota period in
// microseconds, and the smallest quota.
const (
	minShares   = 2
	quotaPeriod = 100000
	minQuota    = 1000
)

func milliCPUToShares(milli int64) int64 { return max(minShares, milli*1024/1000) }

func milliCPUToQuota(milli int64) int64 {
	if milli == 0 {
		return 0
	}
	return max(minQuota, milli*quotaPeriod/1000)
}

func withOOMScoreAdj(r *runtimeapi.LinuxContainerResources, adj int64) *runtimeapi.LinuxContainerResources {
	r.OomScoreAdj = adj
	return r
}

func containerSecurity(pod *v1.Pod, c *v1.Container) *runtimeapi.LinuxContainerSecurityContext {
	sc := &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: namespaceOptions(pod)}
	psc := pod.Spec.SecurityContext
	if psc == nil {
		psc = &v1.PodSecurityContext{}
	}
	csc := c.SecurityContext
	if csc == nil {
		csc = &v1.SecurityContext{}
	}
	runAsUser, _ := effectiveRunAs(pod, c)
	runAsGroup := psc.RunAsGroup
	if csc.RunAsGroup != nil {
		runAsGroup = csc.RunAsGroup
	}
	if runAsUser != nil {
		sc.RunAsUser = &runtimeapi.Int64Value{Value: *runAsUser}
	}
	if runAsGroup != nil {
		sc.RunAsGroup = &runtimeapi.Int64Value{Value: *runAsGroup}
	}
	sc.SupplementalGroups = append(sc.SupplementalGroups, psc.SupplementalGroups...)
	if psc.FSGroup != nil {
		sc.SupplementalGroups = append(sc.SupplementalGroups, *psc.FSGroup)
	}
	if csc.Privileged != nil {
		sc.Privileged = *csc.Privileged
	}
	if csc.ReadOnlyRootFilesystem != nil {
		sc.ReadonlyRootfs = *csc.ReadOnlyRootFilesystem
	}
	if csc.AllowPrivilegeEscalation != nil {
		sc.NoNewPrivs = !*csc.AllowPrivilegeEscalation
	}
	if caps := csc.Capabilities; caps != nil {
		sc.Capabilities = &runtimeapi.Capability{}
		for _, a := range caps.Add {
			sc.Capabilities.AddCapabilities = append(sc.Capabilities.AddCapabilities, string(a))
		}
		for _, d := range caps.Drop {
			sc.Capabilities.DropCapabilities = append(sc.Capabilities.DropCapabilities, string(d))
		}
	}
	opts := psc.SELinuxOptions
	if csc.SELinuxOptions != nil {
		opts = csc.SELinuxOptions
	}
	sc.SelinuxOptions = selinux(opts)
	prof := psc.SeccompProfile
	if csc.SeccompProfile != nil {
		prof = csc.SeccompProfile
	}
	sc.Seccomp = seccomp(prof)
	return sc
}

// effectiveRunAs is the container's runAsUser and whether it must run as
// non-root, its own settings winning over the pod's.
func effectiveRunAs(pod *v1.Pod, c *v1.Container) (runAsUser *int64, nonRoot bool) {
	var nr *bool
	if psc := pod.Spec.SecurityContext; psc != nil {
		runAsUser, nr = psc.RunAsUser, psc.RunAsNonRoot
	}
	if csc := c.SecurityContext; csc != nil {
		if csc.RunAsUser != nil {
			runAsUser = csc.RunAsUser
		}
		if csc.RunAsNonRoot != nil {
			nr = csc.RunAsNonRoot
		}
	}
	return runAsUser, nr != nil && *nr
}

// imageUser is who an image runs as, from CRI ImageStatus: uid when the
// image's user is numeric, else name; neither means root.
type imageUser struct {
	uid  *int64
	name string
}

func imageUserOf(img *runtimeapi.Image) imageUser {
	if img != nil {
		if img.Uid != nil {
			uid := img.Uid.Value
			return imageUser{uid: &uid}
		}
		if img.Username != "" {
			return imageUser{name: img.Username}
		}
	}
	root := int64(0)
	return imageUser{uid: &root}
}

// verifyRunAsNonRoot refuses, as kubelet does and in its words, a
// container that must run as non-root but would run as root: by its
// runAsUser, or else by its image's user, which must then be numeric for
// vk-cri to tell (the runtime resolves names only inside the container).
func verifyRunAsNonRoot(pod *v1.Pod, c *v1.Container, user imageUser) error {
	runAsUser, nonRoot := effectiveRunAs(pod, c)
	if !nonRoot {
		return nil
	}
	desc := fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID) // kubelet's format.Pod
	if runAsUser != nil {
		if *runAsUser == 0 {
			return fmt.Errorf("container's runAsUser breaks non-root policy (pod: %q, container: %s)", desc, c.Name)
		}
		return nil
	}
	switch {
	case user.uid == nil && user.name != "":
		return fmt.Errorf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root (pod: %q, container: %s)", user.name, desc, c.Name)
	case user.uid == nil:
		return nil
	case *user.uid == 0:
		return fmt.Errorf("container has runAsNonRoot and image will run as root (pod: %q, container: %s)", desc, c.Name)
	}
	if errs := validation.IsValidUserID(*user.uid); len(errs) > 0 {
		return fmt.Errorf("container has runAsNonRoot and image has an invalid user id (%d). (Must be 1-(%d)): %s (pod: %q, container: %s)",
			*user.uid, math.MaxInt32, strings.Join(errs, "; "), desc, c.Name)
	}
	return nil
}

// verifyNonRoot is verifyRunAsNonRoot with the image's user from the
// runtime, asked only when it decides (kubelet's getImageUser, by the
// image's name as kubelet asks).
func (w *podWorker) verifyNonRoot(ctx context.Context, pod *v1.Pod, c *v1.Container) error {
	runAsUser, nonRoot := effectiveRunAs(pod, c)
	if !nonRoot || runAsUser != nil {
		return verifyRunAsNonRoot(pod, c, imageUser{})
	}
	st, err := w.p.rt.Images.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: c.Image, UserSpecifiedImage: c.Image}, false)
	if err != nil {
		return fmt.Errorf("image status of %q: %w", c.Image, err)
	}
	return verifyRunAsNonRoot(pod, c, imageUserOf(st.GetImage()))
}
