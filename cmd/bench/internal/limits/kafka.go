package limits

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/pulse-presence/pulse/cmd/bench/internal/harness"
	"github.com/pulse-presence/pulse/cmd/bench/internal/probe"
	"github.com/pulse-presence/pulse/cmd/bench/internal/report"
	"github.com/pulse-presence/pulse/cmd/internal/eventgen"
	"github.com/pulse-presence/pulse/internal/domain/records"
)

// perfReportEvery is how often ProducerPerformance prints a window's figures.
const perfReportEvery = 5 * time.Second

// kafkaLimit runs Kafka's ProducerPerformance unthrottled against a throwaway topic with
// the events topic's partitions and replicas, with payloads of presence.events records'
// size, acks=all and the producer settings ingest's client runs with, for -limits-time
// after report.PerfWarmWindows windows that are not counted.
func kafkaLimit(ctx context.Context, env *harness.Env) (*report.KafkaLimit, error) {
	cp, tool, err := kafkaToolsClasspath(env)
	if err != nil {
		return nil, err
	}
	partitions, replicas, err := env.Lag.Partitions(ctx)
	if err != nil {
		return nil, err
	}
	res := &report.KafkaLimit{Tool: tool, Topic: fmt.Sprintf("bench.limits.%d", time.Now().UnixNano()),
		Partitions: partitions, Replicas: replicas, Raw: filepath.Join("raw", "limits-kafka.txt")}
	if _, err := env.Lag.Adm.CreateTopic(ctx, int32(res.Partitions), int16(replicas), nil, res.Topic); err != nil {
		return nil, fmt.Errorf("creating %s: %w", res.Topic, err)
	}
	defer env.Cleanup(ctx, 30*time.Second, "deleting the throwaway topic "+res.Topic, func(ctx context.Context) error {
		_, err := env.Lag.Adm.DeleteTopics(ctx, res.Topic)
		return err
	})

	payloads, value, record, err := kafkaPayloads(env.Cfg.Users, 2000, time.Now())
	if err != nil {
		return nil, err
	}
	res.ValueBytes, res.RecordBytes = value, record
	payloadFile := filepath.Join(env.RawDir, "limits-kafka-payloads.txt")
	if err := os.WriteFile(payloadFile, payloads, 0o644); err != nil {
		return nil, err
	}
	res.Keys = "ProducerPerformance (" + tool + ")" + " sends records without keys; RoundRobinPartitioner deals them record by record over every partition, as many user-id keys spread Pulse's records, and each payload carries a key's and the schema header's bytes in their place"
	res.Props = []string{
		fmt.Sprintf("bootstrap.servers=127.0.0.1:%d", env.Cfg.Ports.Kafka),
		// ingest's client: acks=all and idempotence, franz-go's default snappy
		// compression and 10 ms linger, batches of up to about 1 MB.
		"acks=all", "enable.idempotence=true", "compression.type=snappy", "linger.ms=10", "batch.size=1000000",
		"partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner",
	}
	args := []string{"-Xms256m", "-Xmx512m", "-Duser.language=en", "-Duser.country=US", "-cp", cp,
		"org.apache.kafka.tools.ProducerPerformance", "--topic", res.Topic, "--num-records", "2000000000",
		"--throughput", "-1", "--payload-file", payloadFile, "--producer-props"}
	args = append(args, res.Props...)
	raw, err := os.Create(filepath.Join(env.Dir, res.Raw))
	if err != nil {
		return nil, err
	}
	defer raw.Close()
	fmt.Fprintf(raw, "$ java %s\n", strings.Join(args, " "))

	want := report.PerfWarmWindows + int(math.Ceil(float64(env.Cfg.LimitsTime)/float64(perfReportEvery)))
	rctx, cancel := context.WithTimeout(ctx, env.Cfg.LimitsTime+report.PerfWarmWindows*perfReportEvery+90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(rctx, "java", args...)
	cmd.Stderr = raw
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	before := env.CPU()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting java: %w", err)
	}
	var lines []perfLine
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		fmt.Fprintln(raw, sc.Text())
		if l, ok := parsePerfLine(sc.Text()); ok {
			lines = append(lines, l)
			if !l.Final && len(lines) >= want {
				break // enough windows: the tool would run for hours
			}
		}
	}
	_ = cmd.Process.Kill()
	io.Copy(io.Discard, out)
	waitErr := cmd.Wait()
	elapsed := time.Since(start).Seconds()
	cpu := probe.Delta(before, env.CPU())
	if ps := cmd.ProcessState; ps != nil {
		res.CPUSeconds = (ps.UserTime() + ps.SystemTime()).Seconds()
	}
	if elapsed > 0 {
		res.KafkaCPUCores = cpu["kafka"] / elapsed
	}
	if err := summarizePerf(res, lines, report.PerfWarmWindows); err != nil {
		if waitErr != nil && ctx.Err() == nil {
			err = fmt.Errorf("%w (java: %v; see %s)", err, waitErr, res.Raw)
		}
		return nil, err
	}
	fmt.Fprintf(env.Out, "      ProducerPerformance: %s records/s, %.2f MB/s (%s B per record, %d partitions, acks=all), avg latency %.0f ms\n",
		report.Num(res.RecordsPerSec), res.MBPerSec, report.Sig(res.RecordBytes), res.Partitions, res.AvgLatencyMs)
	return res, nil
}

// kafkaToolsClasspath is the classpath holding org.apache.kafka.tools: the stack's
// cached Kafka jars, which include kafka-tools (deploy/local/kafka/pom.xml lists it).
func kafkaToolsClasspath(env *harness.Env) (classpath, tool string, err error) {
	lib := filepath.Join(env.Cfg.Home, "cache", "kafka", "lib")
	m, _ := filepath.Glob(filepath.Join(lib, "kafka-tools-[0-9]*.jar"))
	if len(m) == 0 {
		return "", "", fmt.Errorf("no kafka-tools jar in %s: a stack fetched before the pom listed it; `make down up` fetches it", lib)
	}
	return filepath.Join(lib, "*"), filepath.Base(m[0]), nil
}

// kafkaPayloads are n payloads for ProducerPerformance's --payload-file, one a line:
// each is a real presence.events record of a loadgen event (users lg-0 … of users,
// loadgen's mix) — its key, schema header and protobuf value — with every byte folded
// into 7-bit ASCII other than the newline, since the tool reads the file as UTF-8
// text. Sizes and repetitions, which compression sees, stay the records'. It also
// answers the mean value and payload sizes.
func kafkaPayloads(users, n int, now time.Time) (file []byte, valueMean, recordMean float64, err error) {
	rng := rand.New(rand.NewPCG(17, 17))
	g := eventgen.Gen{Prefix: "lg-", Users: max(users, 1), Devices: 2, Kinds: eventgen.MustParseMix(eventgen.DefaultKinds)}
	var values, total int
	for range n {
		e := g.Event(rng).Presence(now)
		// Ingest stamps each event as it arrives: times differ, as compression sees them.
		e.ReceivedAt = now.Add(time.Duration(rng.IntN(1000)) * time.Microsecond)
		r, err := records.Event("presence.events", &e)
		if err != nil {
			return nil, 0, 0, err
		}
		line := append([]byte{}, r.Key...)
		for _, h := range r.Headers {
			line = append(line, h.Key...)
			line = append(line, h.Value...)
		}
		line = append(line, r.Value...)
		values += len(r.Value)
		total += len(line)
		file = append(file, foldASCII(line)...)
		file = append(file, '\n')
	}
	return file, float64(values) / float64(n), float64(total) / float64(n), nil
}

// foldASCII maps every byte into 0x00…0x7f, newline excluded, in place.
func foldASCII(p []byte) []byte {
	for i, c := range p {
		c &= 0x7f
		if c == '\n' {
			c = 0x0b
		}
		p[i] = c
	}
	return p
}

// perfLine is one report of ProducerPerformance: a window's, or the whole run's
// (Final, with percentiles bench does not keep) when the tool finished its records.
type perfLine struct {
	Records                 int64
	RecordsPerSec, MBPerSec float64
	AvgMs, MaxMs            float64
	Final                   bool
}

var perfRE = regexp.MustCompile(`^(\d+) records sent, ([0-9.]+) records/sec \(([0-9.]+) MB/sec\), ([0-9.]+) ms avg latency, ([0-9.]+) ms max latency(?:, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99\.9th)?\.$`)

// parsePerfLine reads one line of the tool's output; false for any other line.
func parsePerfLine(s string) (perfLine, bool) {
	m := perfRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return perfLine{}, false
	}
	l := perfLine{Final: m[6] != ""}
	var err error
	if l.Records, err = strconv.ParseInt(m[1], 10, 64); err != nil {
		return perfLine{}, false
	}
	for i, f := range []*float64{&l.RecordsPerSec, &l.MBPerSec, &l.AvgMs, &l.MaxMs} {
		if *f, err = strconv.ParseFloat(m[i+2], 64); err != nil {
			return perfLine{}, false
		}
	}
	return l, true
}

// summarizePerf adds up into res the windows after the first skip (the producer
// warming up): their records over their time, each window's time being its records
// over its rate. A run that ended by itself before that, with its final line, is
// taken whole.
func summarizePerf(res *report.KafkaLimit, lines []perfLine, skip int) error {
	var windows []perfLine
	var final *perfLine
	for i := range lines {
		if lines[i].Final {
			final = &lines[i]
		} else {
			windows = append(windows, lines[i])
		}
	}
	if len(windows) <= skip {
		if final != nil && final.RecordsPerSec > 0 {
			res.Windows, res.Records, res.Seconds = 1, final.Records, float64(final.Records)/final.RecordsPerSec
			res.RecordsPerSec, res.MBPerSec, res.AvgLatencyMs, res.MaxLatencyMs = final.RecordsPerSec, final.MBPerSec, final.AvgMs, final.MaxMs
			return nil
		}
		return fmt.Errorf("ProducerPerformance reported %d windows, none after the %d of its warm-up", len(windows), skip)
	}
	var mb, lat float64
	for _, w := range windows[skip:] {
		if w.RecordsPerSec <= 0 {
			continue
		}
		sec := float64(w.Records) / w.RecordsPerSec
		res.Windows++
		res.Records += w.Records
		res.Seconds += sec
		mb += w.MBPerSec * sec
		lat += w.AvgMs * float64(w.Records)
		res.MaxLatencyMs = math.Max(res.MaxLatencyMs, w.MaxMs)
	}
	if res.Seconds <= 0 || res.Records == 0 {
		return errors.New("ProducerPerformance sent no records after its warm-up")
	}
	res.RecordsPerSec, res.MBPerSec, res.AvgLatencyMs = float64(res.Records)/res.Seconds, mb/res.Seconds, lat/float64(res.Records)
	return nil
}
