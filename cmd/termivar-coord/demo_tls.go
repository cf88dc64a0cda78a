package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/http"
	"time"
)

// demoTLS is the mutual-TLS setup of `demo --mtls`: a throwaway CA made for
// this run, a server certificate for 127.0.0.1 and a client certificate,
// all in memory (docs/node.md, "Mutual TLS", makes the same with openssl
// for a real node).
type demoTLS struct {
	server *tls.Config  // the node: its certificate, client certificates required
	client *http.Client // the demo's clients: trust the CA, present a certificate
	bare   *http.Client // trusts the CA but has no client certificate
}

// newDemoTLS makes the CA and the two certificates.
func newDemoTLS() (*demoTLS, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "termivar demo CA"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	leaf := func(serial int64, name string, usage x509.ExtKeyUsage) (tls.Certificate, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return tls.Certificate{}, err
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Minute), NotAfter: now.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return tls.Certificate{}, err
		}
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
	}
	srvCert, err := leaf(2, "termivar demo node", x509.ExtKeyUsageServerAuth)
	if err != nil {
		return nil, err
	}
	cliCert, err := leaf(3, "termivar demo client", x509.ExtKeyUsageClientAuth)
	if err != nil {
		return nil, err
	}
	return &demoTLS{
		server: &tls.Config{Certificates: []tls.Certificate{srvCert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert,
			MinVersion: tls.VersionTLS13, NextProtos: []string{"h2", "http/1.1"}},
		client: demoHTTPClient(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cliCert}, MinVersion: tls.VersionTLS13}),
		bare:   demoHTTPClient(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}),
	}, nil
}

func demoHTTPClient(c *tls.Config) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = c
	tr.ForceAttemptHTTP2 = true
	return &http.Client{Transport: tr}
}
