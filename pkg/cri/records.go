package cri

import "github.com/cri-compose/cri-compose/pkg/cri/store"

// sandboxRec and containerRec are the store's entries, as the handlers
// read them: values with shared, read-only metadata (pkg/cri/store).
type (
	sandboxRec   = store.Sandbox
	containerRec = store.Container
)

// recKey orders what the list handlers answer, as the store orders its
// lists (store.NewestFirst).
type recKey struct {
	created int64
	id      string
}

func newestFirst(a, b recKey) int { return store.NewestFirst(a.created, a.id, b.created, b.id) }
