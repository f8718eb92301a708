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
	"strings"
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

// secretToken is a bearer token no error may show any part of.
const secretToken = "OcXX-s3cret-t0k3n"

// expectNoSecret fails if err's text shows secretToken or a part of it.
func expectNoSecret(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	for _, part := range []string{"OcXX", "s3cret", "t0k3n", `\n`} {
		if strings.Contains(err.Error(), part) {
			t.Errorf("%s: the error shows the token (%q): %v", what, part, err)
		}
	}
}

// writeToken writes `contents` to a new file and returns its path.
func writeToken(t *testing.T, contents string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(contents), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestBearerTokenWhitespaceAndFile(t *testing.T) {
	// The server's token file as `echo TOKEN > file` writes it.
	s := startServer(t, "--auth_token_file="+writeToken(t, secretToken+"\n"))
	ctx := testContext(t)
	input, index := tensorops.FromInt64([]int64{1, 2}), tensorops.FromInt64([]int64{1})

	for _, token := range []string{secretToken + "\n", " \t" + secretToken + "\r\n"} {
		out, err := dial(t, s, tensorops.WithBearerToken(token)).IndexSelect(ctx, input, 0, index)
		expectTensor(t, "a token with whitespace around it", out, err, tensorops.Int64, []int64{1}, []int64{2})
	}
	client := dial(t, s, tensorops.WithBearerTokenFile(writeToken(t, "\n"+secretToken+"\n\n")))
	out, err := client.IndexSelect(ctx, input, 0, index)
	expectTensor(t, "WithBearerTokenFile", out, err, tensorops.Int64, []int64{1}, []int64{2})
	stream, err := client.RunStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(1, tensorops.IndexSelectOp(input, 0, index)); err != nil {
		t.Fatal(err)
	}
	stream.CloseSend()
	result, err := stream.Recv()
	if err != nil {
		t.Fatalf("stream with WithBearerTokenFile: %v", err)
	}
	expectTensor(t, "stream with WithBearerTokenFile", result.Result, result.Err, tensorops.Int64, []int64{1}, []int64{2})

	// A wrong token: the server's error does not show it either.
	const wrong = "OcXX-wrong-s3cret-t0k3n\n"
	for what, option := range map[string]tensorops.Option{
		"wrong token": tensorops.WithBearerToken(wrong), "wrong token file": tensorops.WithBearerTokenFile(writeToken(t, wrong)),
	} {
		_, err = dial(t, s, option).IndexSelect(ctx, input, 0, index)
		expectStatus(t, what, err, codes.Unauthenticated, "wrong bearer token")
		expectNoSecret(t, what, err)
	}
}

func TestBadTokensAreRefusedWithoutShowingThem(t *testing.T) {
	dialWith := func(option tensorops.Option) error {
		client, err := tensorops.Dial("127.0.0.1:1", option)
		if err == nil {
			client.Close()
		}
		return err
	}
	for _, token := range []string{"Bearer " + secretToken, secretToken + "\n" + secretToken, secretToken + "\x00",
		secretToken + "\u00e9", secretToken + "\x7f", "\x80" + secretToken} {
		err := dialWith(tensorops.WithBearerToken(token))
		expectStatus(t, "bad token", err, codes.InvalidArgument, "WithBearerToken's token is not a valid bearer token",
			"visible ASCII characters (0x21 to 0x7E)", "has a character outside that range")
		expectNoSecret(t, "bad token", err)
	}
	for _, token := range []string{"", " ", "\r\n"} {
		expectStatus(t, "empty token", dialWith(tensorops.WithBearerToken(token)), codes.InvalidArgument,
			"WithBearerToken's token is not a valid bearer token", "is empty")
	}
	for _, contents := range []string{secretToken + " " + secretToken + "\n", secretToken + "\xff\xfe\n",
		"# a comment\n" + secretToken + "\n"} {
		path := writeToken(t, contents)
		err := dialWith(tensorops.WithBearerTokenFile(path))
		expectStatus(t, "bad token file", err, codes.InvalidArgument, "the token in WithBearerTokenFile's "+path,
			"has a character outside that range")
		expectNoSecret(t, "bad token file", err)
	}
	expectStatus(t, "empty token file", dialWith(tensorops.WithBearerTokenFile(writeToken(t, " \n\n"))),
		codes.InvalidArgument, "is empty")
	missing := filepath.Join(t.TempDir(), "no-such-token")
	expectStatus(t, "missing token file", dialWith(tensorops.WithBearerTokenFile(missing)), codes.InvalidArgument,
		"WithBearerTokenFile: cannot read the token", missing, "no such file or directory")

	_, err := tensorops.Dial("127.0.0.1:1", tensorops.WithBearerToken(secretToken),
		tensorops.WithBearerTokenFile(writeToken(t, secretToken)))
	expectStatus(t, "both", err, codes.InvalidArgument, "give WithBearerToken or WithBearerTokenFile, not both")
	expectNoSecret(t, "both", err)
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

	// A plaintext client, and a client that trusts another CA, get no answer, with a hint.
	noServer := "no tensorops server answers at " + s.address + " (is it running?)"
	_, err = dial(t, s).ServerInfo(ctx)
	expectStatus(t, "plaintext to a TLS port", err, codes.Unavailable, noServer,
		"if the server uses TLS (--tls_cert), dial WithTLS or WithTLSFiles")
	otherCA, _, _ := testCertificates(t)
	_, err = dial(t, s, tensorops.WithTLSFiles(tensorops.TLSFiles{RootCAFile: otherCA, ServerName: "localhost"})).ServerInfo(ctx)
	expectStatus(t, "untrusted server certificate", err, codes.Unavailable, noServer, "its TLS certificate is not trusted")
}

func TestTLSMismatchHints(t *testing.T) {
	caCert, serverCert, serverKey := testCertificates(t)
	ctx := testContext(t)
	files := tensorops.TLSFiles{RootCAFile: caCert, ServerName: "localhost"}

	// A TLS client of a plaintext server.
	plain := startServer(t)
	_, err := dial(t, plain, tensorops.WithTLSFiles(files)).ServerInfo(ctx)
	expectStatus(t, "TLS to a plaintext port", err, codes.Unavailable,
		"no tensorops server answers at "+plain.address+" (is it running?)", "may not use TLS")

	// A TLS client without a certificate of a server that requires one.
	mutual := startServer(t, "--tls_cert="+serverCert, "--tls_key="+serverKey, "--tls_client_ca="+caCert)
	_, err = dial(t, mutual, tensorops.WithTLSFiles(files)).ServerInfo(ctx)
	expectStatus(t, "no client certificate", err, codes.Unavailable,
		"no tensorops server answers at "+mutual.address+" (is it running?)", "client certificate")
}
