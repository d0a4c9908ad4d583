package webhooks

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// endpointSpec is one of the phase's endpoints as the notifier's file spells it.
type endpointSpec struct {
	id, url, secret string
	view            string // public or operator
	maxChanges      int
	maxWait         time.Duration
}

// endpointsJSON is the endpoints file listing specs (docs/webhooks.md): batching as
// given, the notifier's defaults for retries and the timeout.
func endpointsJSON(specs []endpointSpec) []byte {
	type batch struct {
		MaxChanges int    `json:"maxChanges"`
		MaxWait    string `json:"maxWait"`
	}
	type endpoint struct {
		ID     string `json:"id"`
		URL    string `json:"url"`
		Secret string `json:"secret"`
		View   string `json:"view"`
		Batch  batch  `json:"batch"`
	}
	f := struct {
		Endpoints []endpoint `json:"endpoints"`
	}{Endpoints: []endpoint{}}
	for _, s := range specs {
		f.Endpoints = append(f.Endpoints, endpoint{ID: s.id, URL: s.url, Secret: s.secret, View: s.view,
			Batch: batch{MaxChanges: s.maxChanges, MaxWait: s.maxWait.String()}})
	}
	b, _ := json.MarshalIndent(f, "", "  ") // cannot fail: strings and ints
	return append(b, '\n')
}

// endpointsFile is the file the stack's notifier reads its endpoints from.
type endpointsFile struct{ path string }

// locateEndpointsFile finds the running notifier's PULSE_NOTIFIER_ENDPOINTS_FILE in its
// environment (pid 0: unknown), else bench's own, else where stack.sh makes it:
// <PULSE_HOME>/notifier/endpoints.json.
func locateEndpointsFile(pid int, home string) endpointsFile {
	const name = "PULSE_NOTIFIER_ENDPOINTS_FILE"
	if pid != 0 {
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ"); err == nil {
			if v := environValue(b, name); v != "" {
				return endpointsFile{v}
			}
		}
	}
	if v := os.Getenv(name); v != "" {
		return endpointsFile{v}
	}
	return endpointsFile{filepath.Join(home, "notifier", "endpoints.json")}
}

// environValue is name's value in a /proc/<pid>/environ (NUL-separated name=value).
func environValue(environ []byte, name string) string {
	for kv := range bytes.SplitSeq(environ, []byte{0}) {
		if k, v, ok := bytes.Cut(kv, []byte("=")); ok && string(k) == name {
			return string(v)
		}
	}
	return ""
}

// saved is the file as it was before the phase.
type saved struct {
	existed   bool
	content   []byte
	mode      fs.FileMode
	endpoints int // how many endpoints it lists (0 when it is not an endpoints file)
}

func (f endpointsFile) save() (saved, error) {
	b, err := os.ReadFile(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		return saved{mode: 0o600}, nil
	}
	if err != nil {
		return saved{}, fmt.Errorf("reading the notifier's endpoints file: %w", err)
	}
	st, err := os.Stat(f.path)
	if err != nil {
		return saved{}, err
	}
	var parsed struct {
		Endpoints []json.RawMessage `json:"endpoints"`
	}
	_ = json.Unmarshal(b, &parsed)
	return saved{existed: true, content: b, mode: st.Mode().Perm(), endpoints: len(parsed.Endpoints)}, nil
}

// write replaces the file's content at once (a new file renamed over it), readable by
// its owner only: it holds secrets. The notifier never reads half a file.
func (f endpointsFile) write(content []byte) error { return f.replace(content, 0o600) }

func (f endpointsFile) replace(content []byte, mode fs.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(f.path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(f.path), ".bench-endpoints-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(content)
	err = errors.Join(err, tmp.Chmod(mode), tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), f.path)
	}
	if err != nil {
		return fmt.Errorf("writing the notifier's endpoints file: %w", err)
	}
	return nil
}

// restore puts back what save read. A file that did not exist becomes one without
// endpoints: the notifier keeps the endpoints in force when its file is gone, and
// would go on posting to receivers that are no longer there.
func (f endpointsFile) restore(s saved) error {
	if !s.existed {
		return f.replace([]byte(`{"endpoints": []}`+"\n"), s.mode)
	}
	return f.replace(s.content, s.mode)
}
