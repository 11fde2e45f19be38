package cri

import (
	"context"
	"encoding/json"
	"fmt"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/cri/images"
)

// ImageStatus reports the image a name, digest reference or image id names;
// a missing image is a response without image, not an error. Verbose adds
// the engine's inspect document as JSON under the info key "info".
func (s *ImageService) ImageStatus(ctx context.Context, req *runtime.ImageStatusRequest) (*runtime.ImageStatusResponse, error) {
	r, err := images.ParseSpec(req.GetImage())
	if err != nil {
		return nil, grpcError(fmt.Errorf("image status: %w", err))
	}
	img, err := s.images.Lookup(ctx, r)
	if err != nil {
		return nil, grpcError(fmt.Errorf("image status %q: %w", r.String(), err))
	}
	if img == nil {
		return &runtime.ImageStatusResponse{}, nil
	}
	resp := &runtime.ImageStatusResponse{Image: images.InspectToCRI(img)}
	if req.GetVerbose() {
		b, err := json.Marshal(img)
		if err != nil {
			return nil, grpcError(fmt.Errorf("image status %q: encode info: %w", r.String(), err))
		}
		resp.Info = map[string]string{"info": string(b)}
	}
	return resp, nil
}
