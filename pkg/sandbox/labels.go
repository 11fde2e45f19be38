package sandbox

import (
	"fmt"
	"strconv"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Compose's own labels: what `docker compose ls/ps/logs` (v2) and
// `docker-compose ps` (v1) read to see a container as a project member.
const (
	LabelProject     = "com.docker.compose.project"
	LabelService     = "com.docker.compose.service"
	LabelOneoff      = "com.docker.compose.oneoff"
	LabelNumber      = "com.docker.compose.container-number"
	LabelConfigHash  = "com.docker.compose.config-hash"
	LabelVersion     = "com.docker.compose.version"
	LabelWorkingDir  = "com.docker.compose.project.working_dir"
	LabelConfigFiles = "com.docker.compose.project.config_files"
	LabelDependsOn   = "com.docker.compose.depends_on"
)

// Our labels: everything CRI reports back, so the engine is the database.
const (
	LabelType      = "io.cri-compose.type"       // TypeSandbox or TypeContainer
	LabelSandboxID = "io.cri-compose.sandbox-id" // containers: the infra container's id
	LabelConfig    = "io.cri-compose.config"     // the CRI config as protobuf JSON
	LabelImage     = "io.cri-compose.image"      // containers: the image as requested
	LabelLogPath   = "io.cri-compose.log-path"   // containers: absolute CRI log path
	LabelUser      = "io.cri-compose.user"       // containers: who it runs as, "uid:gid:g1,g2" (Identity)

	// Kubelet-style labels, for people and tools that know them.
	LabelPodName       = "io.kubernetes.pod.name"
	LabelPodNamespace  = "io.kubernetes.pod.namespace"
	LabelPodUID        = "io.kubernetes.pod.uid"
	LabelContainerName = "io.kubernetes.container.name"

	TypeSandbox   = "sandbox"
	TypeContainer = "container"
)

// ComposeVersion is written in com.docker.compose.version: the compose file
// format we render, so tools know which writer made the project.
const ComposeVersion = "2.0.0"

func marshalConfig(m proto.Message) (string, error) {
	b, err := protojson.MarshalOptions{}.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("encode config: %w", err)
	}
	return string(b), nil
}

// Object is what the labels of one of our containers say about it.
type Object struct {
	Type      string
	Project   string
	Service   string
	SandboxID string // containers only
	Image     string // containers only
	LogPath   string // containers only
	User      string // containers only: LabelUser, "" when not resolved
	Sandbox   *runtime.PodSandboxConfig
	Container *runtime.ContainerConfig
}

// ParseLabels reads an engine container's labels back into an Object; ok is
// false for containers that are not ours.
func ParseLabels(labels map[string]string) (obj *Object, ok bool, err error) {
	typ := labels[LabelType]
	if typ != TypeSandbox && typ != TypeContainer {
		return nil, false, nil
	}
	obj = &Object{
		Type: typ, Project: labels[LabelProject], Service: labels[LabelService],
		SandboxID: labels[LabelSandboxID], Image: labels[LabelImage], LogPath: labels[LabelLogPath],
		User: labels[LabelUser],
	}
	raw := []byte(labels[LabelConfig])
	if typ == TypeSandbox {
		obj.Sandbox = &runtime.PodSandboxConfig{}
		err = protojson.Unmarshal(raw, obj.Sandbox)
	} else {
		obj.Container = &runtime.ContainerConfig{}
		err = protojson.Unmarshal(raw, obj.Container)
	}
	if err != nil {
		return obj, true, fmt.Errorf("decode %s label: %w", LabelConfig, err)
	}
	return obj, true, nil
}

func composeLabels(project, service, workingDir, configFile string) map[string]string {
	return map[string]string{
		LabelProject:     project,
		LabelService:     service,
		LabelOneoff:      "False", // v1 matches this exact spelling
		LabelNumber:      strconv.Itoa(1),
		LabelVersion:     ComposeVersion,
		LabelWorkingDir:  workingDir,
		LabelConfigFiles: configFile,
	}
}
