// Tests of the client TLS options against a node with mutual TLS. Goal: the
// CLI (enqueue, status, keys) and the worker agent work against a node
// started with --tls-cert/--tls-key/--client-ca when given --ca-file,
// --cert-file and --key-file (flags before or after the command name, or
// the TERMIVAR_TLS_* environment variables), and are refused without a
// client certificate, with one from another CA, or without the node's CA.
// Method: an in-process `serve` node (startNode) on a loopback listener,
// certificates made in the test with crypto/x509, commands run in process.
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/termivar/distributed/client"
	"github.com/termivar/distributed/node"
)

// testPKI holds PEM files: a CA, a server and a client certificate it
// signed, and a client certificate of another CA.
type testPKI struct {
	ca, serverCert, serverKey, clientCert, clientKey, strangerCert, strangerKey string
}

type certAuthority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newCA(t *testing.T, name string) certAuthority {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return certAuthority{cert: cert, key: key}
}

// issue signs a leaf certificate and writes it and its key to dir/name.pem
// and dir/name-key.pem.
func (ca certAuthority) issue(t *testing.T, dir, name string, serial int64, usage []x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	pk, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "PRIVATE KEY", pk)
	return certFile, keyFile
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	ca, stranger := newCA(t, "termivar test CA"), newCA(t, "stranger CA")
	var p testPKI
	p.ca = filepath.Join(dir, "ca.pem")
	writePEM(t, p.ca, "CERTIFICATE", ca.cert.Raw)
	// NB: the node's certificate also authenticates it as a client when a
	// follower forwards to the leader.
	p.serverCert, p.serverKey = ca.issue(t, dir, "node", 2, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth})
	p.clientCert, p.clientKey = ca.issue(t, dir, "client", 3, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})
	p.strangerCert, p.strangerKey = stranger.issue(t, dir, "stranger", 4, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})
	return p
}

// startTLSNode starts a single in-process node with mutual TLS and
// returns its https URL and admin key.
func startTLSNode(t *testing.T, p testPKI) (url, key string) {
	t.Helper()
	n := &tnode{id: "n1", dir: filepath.Join(t.TempDir(), "n1")}
	f := nodeFlags(t, n.dir, n.id, listen(t), listen(t))
	f.tlsCert, f.tlsKey, f.clientCA = p.serverCert, p.serverKey, p.ca
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.start(ctx, f); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.kill)
	if !strings.HasPrefix(n.url, "https://") {
		t.Fatalf("node URL %q is not https", n.url)
	}
	key, err := client.LoadKey(filepath.Join(n.dir, node.AdminKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	return n.url, key
}

// TestCLI_MutualTLS: enqueue, status, keys and a worker agent against an
// mTLS node; refusals without the right certificates. Not parallel: part of
// it sets the TERMIVAR_TLS_* environment variables.
func TestCLI_MutualTLS(t *testing.T) {
	p := newTestPKI(t)
	url, key := startTLSNode(t, p)
	mtls := []string{"--ca-file", p.ca, "--cert-file", p.clientCert, "--key-file", p.clientKey}

	// enqueue with the TLS flags after the command name, status with them
	// before it (global options).
	args := append([]string{"enqueue", "--scan", "s1"}, mtls...)
	if code, _, errOut := runCLI(t, url, key, append(args, "a", "b", "c", "d")...); code != exitOK {
		t.Fatalf("enqueue over mTLS: exit %d: %s", code, errOut)
	}
	status := func(extra ...string) statusJSON {
		t.Helper()
		code, out, errOut := runCLI(t, url, key, append(extra, "status", "--json")...)
		if code != exitOK {
			t.Fatalf("status over mTLS: exit %d: %s", code, errOut)
		}
		var st statusJSON
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st := status(mtls...); st.QueuedTasks != 4 {
		t.Fatalf("status: %d queued, want 4", st.QueuedTasks)
	}

	// The worker agent (the `worker` command's code) completes the scan.
	ctx, cancel := context.WithCancel(context.Background())
	werr := make(chan error, 1)
	wlog := &lockedBuffer{}
	go func() {
		env := &cliEnv{stdin: strings.NewReader(""), stdout: wlog, stderr: wlog}
		wargs := append([]string{"--server", url, "--key", key}, mtls...)
		wargs = append(wargs, "--id", "tls-w1", "--capacity", "2", "--heartbeat", "500ms", "--poll-wait", "1s", "--grace", "5s",
			"--", "/bin/sh", "-c", `printf "r:%s" "$TERMIVAR_TARGET"`)
		werr <- runWorker(ctx, env, wargs)
	}()
	waitCond(t, "the worker to complete 4 tasks", func() bool { return status(mtls...).Results == 4 })
	cancel()
	if err := <-werr; err != nil {
		t.Fatalf("worker: %v\n%s", err, wlog.String())
	}

	// keys (the older client commands) take the same options.
	var out, errOut strings.Builder
	if code := runKeysTo(append([]string{"list", "--json", "--server", url, "--key", key}, mtls...), &out, &errOut); code != exitOK || !strings.Contains(out.String(), `"role":"admin"`) {
		t.Fatalf("keys list over mTLS: exit %d: %s%s", code, out.String(), errOut.String())
	}

	// Refusals: no client certificate, a certificate of another CA, no CA
	// for the node's certificate, plain HTTP, and bad TLS options. A
	// refused connection exits 2 or 3: under TLS 1.3 the client learns
	// that the node rejected its certificate either from the alert
	// ("certificate required") or, when it was already writing, from a
	// broken pipe.
	const refused = -1
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"without a client certificate", []string{"--ca-file", p.ca}, refused, "--cert-file and --key-file"},
		{"with a stranger's certificate", []string{"--ca-file", p.ca, "--cert-file", p.strangerCert, "--key-file", p.strangerKey}, refused, ""},
		{"without the node's CA", []string{"--cert-file", p.clientCert, "--key-file", p.clientKey}, exitUnreachable, "certificate signed by unknown authority"},
		{"over plain HTTP", append([]string{"--server", "http" + strings.TrimPrefix(url, "https")}, mtls...), refused, ""},
		{"with a certificate but no key", []string{"--ca-file", p.ca, "--cert-file", p.clientCert}, exitUsage, "--cert-file and --key-file go together"},
		{"with a CA file that holds no certificate", []string{"--ca-file", p.clientKey, "--cert-file", p.clientCert, "--key-file", p.clientKey}, exitUsage, "no PEM certificate"},
		{"with a missing key file", []string{"--ca-file", p.ca, "--cert-file", p.clientCert, "--key-file", p.clientKey + ".missing"}, exitUsage, "client certificate"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, errOut := runCLI(t, url, key, append([]string{"status"}, c.args...)...)
			ok := code == c.code || (c.code == refused && (code == exitRejected || code == exitUnreachable))
			if !ok || !strings.Contains(errOut, c.want) {
				t.Fatalf("status %s: exit %d (%s), want exit %d mentioning %q", c.name, code, errOut, c.code, c.want)
			}
		})
	}
	out.Reset()
	errOut.Reset()
	if code := runKeysTo([]string{"list", "--server", url, "--key", key, "--ca-file", p.ca}, &out, &errOut); code != exitRejected && code != exitUnreachable {
		t.Fatalf("keys list without a client certificate: exit %d: %s", code, errOut.String())
	}

	// The environment variables stand in for the flags.
	t.Setenv(envCAFile, p.ca)
	t.Setenv(envCertFile, p.clientCert)
	t.Setenv(envKeyFile, p.clientKey)
	if st := status(); st.Results != 4 {
		t.Fatalf("status from the environment: %+v", st)
	}
	if code, _, errOut := runCLI(t, url, key, "enqueue", "--scan", "s2", "e"); code != exitOK {
		t.Fatalf("enqueue from the environment: exit %d: %s", code, errOut)
	}
	out.Reset()
	if code := runKeysTo([]string{"list", "--server", url, "--key", key}, &out, &errOut); code != exitOK {
		t.Fatalf("keys list from the environment: exit %d: %s", code, errOut.String())
	}
	// A flag wins over the environment.
	if code, _, _ := runCLI(t, url, key, "status", "--cert-file", p.strangerCert, "--key-file", p.strangerKey); code != exitRejected && code != exitUnreachable {
		t.Fatalf("status with a stranger's certificate over the environment's: exit %d", code)
	}
}
