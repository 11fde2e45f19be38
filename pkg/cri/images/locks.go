package images

import "sync"

// Locks is a set of mutexes by key, removed when unused. The zero value
// is ready to use.
type Locks struct {
	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	sync.Mutex
	n int
}

// Lock locks key and returns its unlock function.
func (k *Locks) Lock(key string) func() {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyLock{}
	}
	l := k.locks[key]
	if l == nil {
		l = &keyLock{}
		k.locks[key] = l
	}
	l.n++
	k.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		k.mu.Lock()
		if l.n--; l.n == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}
