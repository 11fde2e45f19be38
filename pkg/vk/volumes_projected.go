package vk

import (
	"fmt"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
)

// tokenSource issues service account tokens bound to a pod (apiObjects,
// through the TokenRequest API). An objectSource without it cannot serve
// serviceAccountToken projections.
type tokenSource interface {
	serviceAccountToken(pod *v1.Pod, s *v1.ServiceAccountTokenProjection) ([]byte, error)
}

// allocatableSource knows the node's allocatable resources, which an
// unset limit reads as in the downward API.
type allocatableSource interface {
	allocatable() v1.ResourceList
}

func allocatableOf(src objectSource) v1.ResourceList {
	if a, ok := src.(allocatableSource); ok {
		return a.allocatable()
	}
	return nil
}

// projectedFiles gathers the files of a projected volume as kubelet's
// projected plugin does: every source's files in one folder, each source
// with the volume's defaultMode unless its items say otherwise. An optional
// configMap or secret that is missing adds nothing; a path given twice is
// refused (the API server validates that too).
func projectedFiles(pod *v1.Pod, s *v1.ProjectedVolumeSource, src objectSource) (map[string]file, error) {
	files := map[string]file{}
	add := func(fs map[string]file) error {
		for p, f := range fs {
			p = filepath.Clean(p)
			if _, dup := files[p]; dup {
				return fmt.Errorf("projected path %q given by two sources", p)
			}
			files[p] = f
		}
		return nil
	}
	for i := range s.Sources {
		ps := &s.Sources[i]
		var fs map[string]file
		var err error
		switch {
		case ps.ConfigMap != nil:
			fs, err = configMapFiles(pod.Namespace, &v1.ConfigMapVolumeSource{
				LocalObjectReference: ps.ConfigMap.LocalObjectReference,
				Items:                ps.ConfigMap.Items, DefaultMode: s.DefaultMode, Optional: ps.ConfigMap.Optional,
			}, src)
		case ps.Secret != nil:
			fs, err = secretFiles(pod.Namespace, &v1.SecretVolumeSource{
				SecretName: ps.Secret.Name,
				Items:      ps.Secret.Items, DefaultMode: s.DefaultMode, Optional: ps.Secret.Optional,
			}, src)
		case ps.DownwardAPI != nil:
			fs, err = downwardAPIFiles(pod, &v1.DownwardAPIVolumeSource{Items: ps.DownwardAPI.Items, DefaultMode: s.DefaultMode}, allocatableOf(src))
		case ps.ServiceAccountToken != nil:
			ts, ok := src.(tokenSource)
			if !ok {
				return nil, fmt.Errorf("serviceAccountToken projection: no token source")
			}
			var tok []byte
			if tok, err = ts.serviceAccountToken(pod, ps.ServiceAccountToken); err == nil {
				fs = map[string]file{ps.ServiceAccountToken.Path: tokenFile(pod, tok, s.DefaultMode)}
			}
		case ps.ClusterTrustBundle != nil:
			err = fmt.Errorf("clusterTrustBundle projection is not supported by vk-cri")
		case ps.PodCertificate != nil:
			err = fmt.Errorf("podCertificate projection is not supported by vk-cri")
		}
		if err != nil {
			return nil, err
		}
		if err := add(fs); err != nil {
			return nil, err
		}
	}
	return files, nil
}
