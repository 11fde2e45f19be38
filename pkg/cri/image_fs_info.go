package cri

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ImageFsInfo reports the engine's image store: the mountpoint is the storage
// driver's directory (<DockerRootDir>/<Driver>, /var/lib/docker/overlay2),
// the used bytes the sum of the images' sizes. That sum counts a layer
// shared by several images once per image, so it overstates the use when
// images share layers; the engine's exact figure (GET /system/df) also walks
// every container's and volume's files on Engine API 1.41, too slow for a
// call kubelet makes every few seconds. Inodes are not counted (left unset,
// kubelet then takes the filesystem's). The container filesystem is the same
// mount, reported alike, so that kubelet sees image and container storage
// on one filesystem.
func (s *ImageService) ImageFsInfo(ctx context.Context, _ *runtime.ImageFsInfoRequest) (*runtime.ImageFsInfoResponse, error) {
	info, err := s.d.Info(ctx)
	if err != nil {
		return nil, grpcError(fmt.Errorf("image filesystem info: %w", err))
	}
	if info.DockerRootDir == "" {
		return nil, grpcError(fmt.Errorf("image filesystem info: the engine reports no root directory"))
	}
	mount := info.DockerRootDir
	if info.Driver != "" {
		mount = filepath.Join(info.DockerRootDir, info.Driver)
	}
	sums, err := s.d.ImageList(ctx, "")
	if err != nil {
		return nil, grpcError(fmt.Errorf("image filesystem info: %w", err))
	}
	var used uint64
	for _, sum := range sums {
		if sum.Size > 0 {
			used += uint64(sum.Size)
		}
	}
	now := time.Now().UnixNano()
	usage := func() *runtime.FilesystemUsage {
		return &runtime.FilesystemUsage{
			Timestamp: now,
			FsId:      &runtime.FilesystemIdentifier{Mountpoint: mount},
			UsedBytes: &runtime.UInt64Value{Value: used},
		}
	}
	return &runtime.ImageFsInfoResponse{
		ImageFilesystems:     []*runtime.FilesystemUsage{usage()},
		ContainerFilesystems: []*runtime.FilesystemUsage{usage()},
	}, nil
}
