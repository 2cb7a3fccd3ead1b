// notecheck verifies a signed note with golang.org/x/mod/sumdb/note: the log's Ed25519
// line (type 0x01, note.NewVerifier) and C2SP cosignature/v1 lines (type 0x04), for which
// it supplies a note.Verifier written from c2sp.org/tlog-cosignature. It prints the
// verified signatures as JSON and exits 1 when note.Open refuses the note.
//
// Usage: notecheck -vkey LOGVKEY [-cosigner VKEY]... NOTEFILE
package main

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

type cosigner struct {
	name string
	hash uint32
	key  ed25519.PublicKey
}

func (c *cosigner) Name() string    { return c.name }
func (c *cosigner) KeyHash() uint32 { return c.hash }

// Verify checks sig = u64 BE timestamp || Ed25519 signature over
// "cosignature/v1\ntime <timestamp>\n" || msg.
func (c *cosigner) Verify(msg, sig []byte) bool {
	if len(sig) != 8+ed25519.SignatureSize {
		return false
	}
	ts := binary.BigEndian.Uint64(sig[:8])
	if ts > 1<<63-1 {
		return false
	}
	m := append([]byte("cosignature/v1\ntime "+strconv.FormatUint(ts, 10)+"\n"), msg...)
	return ed25519.Verify(c.key, m, sig[8:])
}

func newCosigner(vkey string) (*cosigner, error) {
	parts := strings.SplitN(vkey, "+", 3)
	if len(parts) != 3 {
		return nil, errors.New("malformed cosigner vkey")
	}
	raw, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil || len(raw) != 33 || raw[0] != 0x04 {
		return nil, errors.New("cosigner vkey is not type 0x04 with a 32-byte key")
	}
	h := sha256.Sum256(append([]byte(parts[0]+"\n"), raw...))
	hash := binary.BigEndian.Uint32(h[:4])
	if fmt.Sprintf("%08x", hash) != parts[1] {
		return nil, errors.New("cosigner key hash does not match")
	}
	return &cosigner{name: parts[0], hash: hash, key: ed25519.PublicKey(raw[1:])}, nil
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	vkey := flag.String("vkey", "", "log verifier key")
	var cosigners multi
	flag.Var(&cosigners, "cosigner", "cosigner verifier key (repeatable)")
	flag.Parse()
	msg, err := os.ReadFile(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	logv, err := note.NewVerifier(*vkey)
	if err != nil {
		fmt.Fprintln(os.Stderr, "log vkey:", err)
		os.Exit(2)
	}
	verifiers := []note.Verifier{logv}
	for _, c := range cosigners {
		v, err := newCosigner(c)
		if err != nil {
			fmt.Fprintln(os.Stderr, "cosigner:", err)
			os.Exit(2)
		}
		verifiers = append(verifiers, v)
	}
	n, err := note.Open(msg, note.VerifierList(verifiers...))
	if err != nil {
		fmt.Fprintln(os.Stderr, "note.Open:", err)
		os.Exit(1)
	}
	type sig struct {
		Name string `json:"name"`
		Hash string `json:"hash"`
	}
	out := struct {
		Text       string `json:"text"`
		Sigs       []sig  `json:"sigs"`
		Unverified int    `json:"unverified"`
	}{Text: n.Text, Unverified: len(n.UnverifiedSigs)}
	for _, s := range n.Sigs {
		out.Sigs = append(out.Sigs, sig{s.Name, fmt.Sprintf("%08x", s.Hash)})
	}
	json.NewEncoder(os.Stdout).Encode(out)
}
