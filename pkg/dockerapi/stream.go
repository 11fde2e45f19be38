package dockerapi

import (
	"encoding/json"
	"errors"
	"io"

	"github.com/containerd/errdefs/pkg/errhttp"
	"github.com/moby/moby/api/types/jsonstream"
)

// readJSONStream drains an engine progress stream and returns the first
// error message it carries.
func readJSONStream(r io.Reader) error {
	dec := json.NewDecoder(r)
	for {
		var m jsonstream.Message
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if m.Error != nil {
			return errors.New(m.Error.Message)
		}
	}
}

// streamError is an error message of a progress stream, of the errdefs
// class its code names (as the moby client's Wait makes it), so that wrap
// classifies it.
func streamError(e *jsonstream.Error) error {
	return &codedError{msg: e.Message, class: errhttp.ToNative(e.Code)}
}

type codedError struct {
	msg   string
	class error
}

func (e *codedError) Error() string        { return e.msg }
func (e *codedError) Is(target error) bool { return e.class != nil && errors.Is(e.class, target) }
