package cassx

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// agreementPoll is how often AwaitSchemaAgreement asks again.
const agreementPoll = 200 * time.Millisecond

// AwaitSchemaAgreement waits until one node and every peer it knows of report the same
// schema version, so that a statement after a schema change finds the change on
// whichever node coordinates it. It gives up when ctx ends, with the last disagreement.
//
// The driver runs a similar check after each schema change, but it skips a peer whose
// row has no tokens or schema version yet: a node still joining the ring. Such a node
// opens its CQL port moments later without the new keyspace or table, and a statement
// it coordinates fails with "Keyspace ... doesn't exist". Here a joining peer counts as
// not agreeing. A peer that is down keeps its last schema version, so a change made
// while a node is down does not reach agreement until that node is back; the caller's
// deadline decides how long that may take.
func AwaitSchemaAgreement(ctx context.Context, session *gocql.Session) error {
	for {
		err := schemaAgreed(ctx, session)
		if err == nil {
			return nil
		}
		t := time.NewTimer(agreementPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("waiting for schema agreement: %w (last seen: %v)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// peerSchema is one row of a node's system.peers, as far as agreement is concerned.
type peerSchema struct {
	addr    net.IP
	version gocql.UUID // zero while the peer has not announced one
	tokens  int        // zero while the peer is joining
}

// schemaAgreed asks one node for its own schema version and its peers' and reports
// nil when they are all one.
func schemaAgreed(ctx context.Context, session *gocql.Session) error {
	var (
		hostID, local gocql.UUID
		addr          net.IP
	)
	if err := session.Query(`SELECT host_id, rpc_address, schema_version FROM system.local WHERE key = 'local'`).
		Consistency(gocql.One).ScanContext(ctx, &hostID, &addr, &local); err != nil {
		return fmt.Errorf("reading system.local: %w", err)
	}
	// The peers must be read on the same node, or the comparison mixes two views.
	iter := session.Query(`SELECT peer, schema_version, tokens FROM system.peers`).
		Consistency(gocql.One).SetHostID(hostID.String()).IterContext(ctx)
	var (
		peers  []peerSchema
		p      peerSchema
		tokens []string
	)
	for iter.Scan(&p.addr, &p.version, &tokens) {
		p.tokens = len(tokens)
		peers = append(peers, p)
		p, tokens = peerSchema{}, nil
	}
	if err := iter.Close(); err != nil {
		return fmt.Errorf("reading system.peers on %s: %w", addr, err)
	}
	return compareSchemas(addr, local, peers)
}

// compareSchemas reports nil when every peer has joined and has the local version, and
// otherwise names each peer that has not.
func compareSchemas(addr net.IP, local gocql.UUID, peers []peerSchema) error {
	var differ []string
	for _, p := range peers {
		switch {
		case p.tokens == 0 || p.version == (gocql.UUID{}):
			differ = append(differ, p.addr.String()+" is joining the ring")
		case p.version != local:
			differ = append(differ, fmt.Sprintf("%s has schema %s", p.addr, p.version))
		}
	}
	if len(differ) == 0 {
		return nil
	}
	slices.Sort(differ)
	return fmt.Errorf("%s has schema %s; %s", addr, local, strings.Join(differ, ", "))
}
