package tensorops_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"tensorops/client/go/tensorops"
)

// writePEM writes one PEM block to dir/name and returns the path.
func writePEM(t *testing.T, dir, name, blockType string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// testCertificates makes a CA and a server certificate for localhost and 127.0.0.1 signed by it,
// and returns the paths of the CA certificate, the server certificate and the server key.
func testCertificates(t *testing.T) (caCert, serverCert, serverKey string) {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTemplate := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tensorops test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	template := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, caTemplate, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, dir, "ca.pem", "CERTIFICATE", caDER), writePEM(t, dir, "server.pem", "CERTIFICATE", der),
		writePEM(t, dir, "server.key", "PRIVATE KEY", keyDER)
}

func TestBearerToken(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "--auth_token_file="+tokenFile)
	ctx := testContext(t)

	_, err := dial(t, s).ServerInfo(ctx)
	expectStatus(t, "no token", err, codes.Unauthenticated, "missing authorization metadata")
	_, err = dial(t, s, tensorops.WithBearerToken("wrong")).IndexSelect(ctx,
		tensorops.FromInt64([]int64{1, 2}), 0, tensorops.FromInt64([]int64{1}))
	expectStatus(t, "wrong token", err, codes.Unauthenticated, "wrong bearer token")

	client := dial(t, s, tensorops.WithBearerToken("s3cret-token"))
	info, err := client.ServerInfo(ctx)
	if err != nil {
		t.Fatalf("with the token: %v", err)
	}
	if !info.GetAuthTokenRequired() {
		t.Error("auth_token_required is false")
	}
	// The stream carries the token too.
	stream, err := client.RunStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(1, tensorops.IndexSelectOp(tensorops.FromInt64([]int64{1, 2}), 0, tensorops.FromInt64([]int64{1}))); err != nil {
		t.Fatal(err)
	}
	stream.CloseSend()
	result, err := stream.Recv()
	if err != nil {
		t.Fatalf("stream with the token: %v", err)
	}
	expectTensor(t, "stream with the token", result.Result, result.Err, tensorops.Int64, []int64{1}, []int64{2})
}

func TestTLS(t *testing.T) {
	caCert, serverCert, serverKey := testCertificates(t)
	s := startServer(t, "--tls_cert="+serverCert, "--tls_key="+serverKey)
	ctx := testContext(t)

	client := dial(t, s, tensorops.WithTLSFiles(tensorops.TLSFiles{RootCAFile: caCert, ServerName: "localhost"}))
	info, err := client.ServerInfo(ctx)
	if err != nil {
		t.Fatalf("over TLS: %v", err)
	}
	if !info.GetTls() {
		t.Error("tls is false in ServerInfo")
	}
	out, err := client.Gather(ctx, tensorops.FromFloat32([]float32{1, 2}), 0, tensorops.FromInt64([]int64{1, 1, 0}))
	expectTensor(t, "gather over TLS", out, err, tensorops.Float32, []int64{3}, []float32{2, 2, 1})

	// A plaintext client, and a client that trusts another CA, get no answer.
	_, err = dial(t, s).ServerInfo(ctx)
	expectStatus(t, "plaintext to a TLS port", err, codes.Unavailable)
	otherCA, _, _ := testCertificates(t)
	_, err = dial(t, s, tensorops.WithTLSFiles(tensorops.TLSFiles{RootCAFile: otherCA, ServerName: "localhost"})).ServerInfo(ctx)
	expectStatus(t, "untrusted server certificate", err, codes.Unavailable)
}
