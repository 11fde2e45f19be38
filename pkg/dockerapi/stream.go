package dockerapi

import (
	"encoding/json"
	"errors"
	"io"

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
