package main

import (
	"fmt"

	"github.com/cri-compose/cri-compose/pkg/cri/staging"
	"github.com/cri-compose/cri-compose/pkg/dockerapi"
)

// endpoint is how --docker-host is reached when it is tcp:// or ssh://.
func (fc *fileConfig) endpoint() dockerapi.Endpoint {
	e := dockerapi.Endpoint{
		CertPath:      fc.DockerCertPath,
		AllowPlainTCP: fc.DockerAllowPlainTCP,
		SSH: dockerapi.SSHConfig{
			KnownHostsFile:        fc.SSHKnownHosts,
			InsecureIgnoreHostKey: fc.SSHInsecureIgnoreHostKey,
		},
	}
	if fc.SSHIdentityFile != "" {
		e.SSH.IdentityFiles = []string{fc.SSHIdentityFile}
	}
	return e
}

// stageMode checks --stage-mounts.
func (fc *fileConfig) stageMode() (staging.Mode, error) {
	m := staging.Mode(fc.StageMounts)
	switch m {
	case staging.Auto, staging.Always, staging.Never:
		return m, nil
	}
	return "", fmt.Errorf("--stage-mounts %q: want auto, always or never", fc.StageMounts)
}
