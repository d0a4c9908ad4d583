package historystore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
)

// A rollup fold's checkpoint is stored as data chunks, then a header (chunk -1) naming
// the generation, the offset and the chunk count, written once every chunk is: a
// reader only ever takes a complete checkpoint.
const (
	insertCheckpointChunkCQL = `INSERT INTO rollup_checkpoints (consumer_group, partition, chunk, generation, data)
 VALUES (?, ?, ?, ?, ?)`
	insertCheckpointHeaderCQL = `INSERT INTO rollup_checkpoints (consumer_group, partition, chunk, generation, log_offset, chunks)
 VALUES (?, ?, -1, ?, ?, ?)`
	selectCheckpointCQL = `SELECT chunk, generation, log_offset, chunks, data FROM rollup_checkpoints
 WHERE consumer_group = ? AND partition = ?`
)

// checkpointChunk is the most checkpoint bytes in one row: well under Cassandra's
// mutation and batch limits, each chunk is written as its own request.
const checkpointChunk = 256 << 10

// chunkBase is where a generation's data chunks start. Even and odd generations use
// separate chunk numbers, so a checkpoint that dies half written never overwrites the
// chunks of the complete one its header still names.
func chunkBase(generation int64) int32 {
	if generation%2 == 1 {
		return 1 << 20
	}
	return 0
}

// Checkpoint is a fold's state as stored: the presence.changes offset it covers (every
// record up to and including it is folded in), its generation, and its bytes.
type Checkpoint struct {
	Generation int64
	Offset     int64
	Data       []byte
}

// CheckpointBatches are the requests that store cp as the checkpoint of the fold of
// partition for consumer group: the chunks, each a request of its own, and the header,
// to be written only once all of them are.
func CheckpointBatches(group string, partition int32, cp Checkpoint) (chunks []*Batch, header *Batch) {
	base := chunkBase(cp.Generation)
	data := cp.Data
	for i := 0; i == 0 || i*checkpointChunk < len(data); i++ {
		part := data[i*checkpointChunk : min((i+1)*checkpointChunk, len(data))]
		chunks = append(chunks, Single(Write{InsertCheckpointChunk, checkpointKey(group, partition),
			[]any{group, partition, base + int32(i), cp.Generation, part}}))
	}
	header = Single(Write{InsertCheckpointHeader, checkpointKey(group, partition),
		[]any{group, partition, cp.Generation, cp.Offset, int32(len(chunks))}})
	return chunks, header
}

func checkpointKey(group string, partition int32) string {
	return fmt.Sprintf("%s\x00%s\x00%d", TableCheckpoints, group, partition)
}

// LoadCheckpoint reads the newest complete checkpoint of partition for consumer
// group; ok is false when there is none.
func (s *Store) LoadCheckpoint(ctx context.Context, group string, partition int32) (cp Checkpoint, ok bool, err error) {
	iter := s.session.Query(selectCheckpointCQL, group, partition).IterContext(ctx)
	type chunk struct {
		generation int64
		data       []byte
	}
	chunks := map[int32]chunk{}
	var (
		header      *Checkpoint
		count       int32
		n           int32
		gen, offset int64
		nchunks     *int32
		logOffset   *int64
		data        []byte
	)
	var bad error
	for iter.Scan(&n, &gen, &logOffset, &nchunks, &data) {
		if n == -1 {
			if logOffset == nil || nchunks == nil {
				bad = errors.New("loading rollup checkpoint: header without offset or chunk count")
				continue
			}
			offset, count = *logOffset, *nchunks
			header = &Checkpoint{Generation: gen, Offset: offset}
			continue
		}
		chunks[n] = chunk{gen, slices.Clone(data)}
	}
	if err := iter.Close(); err != nil {
		return Checkpoint{}, false, fmt.Errorf("loading rollup checkpoint: %w", err)
	}
	if bad != nil {
		return Checkpoint{}, false, bad
	}
	if header == nil {
		return Checkpoint{}, false, nil
	}
	base := chunkBase(header.Generation)
	var buf bytes.Buffer
	for i := range count {
		c, ok := chunks[base+i]
		if !ok || c.generation != header.Generation {
			return Checkpoint{}, false, fmt.Errorf("loading rollup checkpoint: generation %d lacks chunk %d of %d", header.Generation, i, count)
		}
		buf.Write(c.data)
	}
	header.Data = buf.Bytes()
	return *header, true, nil
}
