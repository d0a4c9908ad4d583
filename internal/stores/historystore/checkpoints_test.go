package historystore

import (
	"bytes"
	"testing"
)

// A checkpoint is stored as chunks of at most checkpointChunk bytes, at the chunk
// numbers of its generation's parity, each a request of its own, then a header that
// names the offset and the chunk count.
func TestCheckpointBatches(t *testing.T) {
	for _, tt := range []struct {
		generation int64
		size       int
		chunks     int
		base       int32
	}{
		{2, 0, 1, 0},
		{2, checkpointChunk, 1, 0},
		{3, checkpointChunk + 1, 2, 1 << 20},
		{4, 3*checkpointChunk - 7, 3, 0},
	} {
		data := bytes.Repeat([]byte{7}, tt.size)
		chunks, header := CheckpointBatches("g", 5, Checkpoint{Generation: tt.generation, Offset: 99, Data: data})
		if len(chunks) != tt.chunks {
			t.Fatalf("%d bytes: %d chunks, want %d", tt.size, len(chunks), tt.chunks)
		}
		var joined []byte
		for i, c := range chunks {
			w := c.Writes[0]
			if c.Keys != 1 || len(c.Writes) != 1 || w.Statement() != InsertCheckpointChunk || w.Table() != TableCheckpoints {
				t.Fatalf("chunk %d: %+v", i, c)
			}
			v := w.Values()
			if v[0] != "g" || v[1] != int32(5) || v[2] != tt.base+int32(i) || v[3] != tt.generation {
				t.Errorf("chunk %d of generation %d: values %v", i, tt.generation, v[:4])
			}
			joined = append(joined, v[4].([]byte)...)
		}
		if !bytes.Equal(joined, data) {
			t.Errorf("%d bytes: the chunks hold %d", tt.size, len(joined))
		}
		h := header.Writes[0]
		if v := h.Values(); h.Statement() != InsertCheckpointHeader || v[2] != tt.generation || v[3] != int64(99) || v[4] != int32(tt.chunks) {
			t.Errorf("header %v", v)
		}
	}
}
