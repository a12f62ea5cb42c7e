package quota

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// stateVersion is the version of the state file's format.
const stateVersion = 1

// state is the state file's content.
type state struct {
	Version  int            `json:"version"`
	Saved    time.Time      `json:"saved"`
	Counters []savedCounter `json:"counters"`
}

// savedCounter is one counter in the state file.
type savedCounter struct {
	Rule     string    `json:"rule"`
	Scope    string    `json:"scope"`
	Start    time.Time `json:"start"`
	Bytes    int64     `json:"bytes"`
	Requests int64     `json:"requests"`
}

// Save folds the pending counts (see [Tracker.Fold]) and writes every
// counter of its current window to path, atomically: a temporary file in
// the same directory, synced, renamed over path.
func (t *Tracker) Save(path string) error {
	t.Fold()
	st := state{Version: stateVersion, Saved: t.now().UTC()}
	for _, c := range t.Counters() {
		c.mu.Lock()
		start := c.start
		c.mu.Unlock()
		st.Counters = append(st.Counters, savedCounter{Rule: c.rule.Name, Scope: c.scope,
			Start: time.Unix(0, start).UTC(), Bytes: c.base[kindBytes].Load(), Requests: c.base[kindRequests].Load()})
	}
	data, err := json.MarshalIndent(&st, "", "\t")
	if err != nil {
		return fmt.Errorf("quota: save %s: %w", path, err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("quota: save %s: %w", path, err)
	}
	tmp := f.Name()
	_, err = f.Write(append(data, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("quota: save %s: %w", path, err)
	}
	return nil
}

// Load reads counters Save wrote to path into t, whose counters are to
// be new: those of a window still current are restored, those of a past
// window or of a rule t does not have are dropped. A missing file is no
// error (nothing was saved yet). It returns how many counters it
// restored.
func (t *Tracker) Load(path string) (int, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("quota: load %s: %w", path, err)
	}
	var st state
	if err := json.Unmarshal(data, &st); err != nil {
		return 0, fmt.Errorf("quota: load %s: %w", path, err)
	}
	if st.Version != stateVersion {
		return 0, fmt.Errorf("quota: load %s: format version %d, want %d", path, st.Version, stateVersion)
	}
	n := 0
	for _, sc := range st.Counters {
		c := t.counterFor(sc.Rule, sc.Scope)
		if c == nil {
			continue
		}
		c.roll(t.now())
		c.mu.Lock()
		if c.start == sc.Start.UnixNano() {
			c.base[kindBytes].Store(sc.Bytes)
			c.base[kindRequests].Store(sc.Requests)
			n++
		}
		c.mu.Unlock()
	}
	return n, nil
}
