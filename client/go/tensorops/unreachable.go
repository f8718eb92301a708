package tensorops

import (
	"context"
	"crypto/tls"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// unreachable rewrites the Unavailable errors of calls that reached no server at target into
// "no tensorops server answers at TARGET (is it running?)", with a hint when the connection was
// closed while it was set up (a TLS mismatch, typically) and gRPC's own message at the end. The
// code stays Unavailable; a server's own Unavailable (one that shuts down) keeps its message. A
// stream the server's gRPC reset under its resource quota (ENHANCE_YOUR_CALM) gets resetHint.
type unreachable struct {
	target string
	// The client's TLS configuration; nil for plaintext.
	tlsConfig *tls.Config
}

// What gRPC-Go (1.33 on) says when a call found no connection: a dial that failed, or a
// connection closed before the server answered.
var noConnection = []string{
	"connection error:", "all SubConns are in TransientFailure", "connection closed",
	"use of closed network connection", "error reading server preface", "authentication handshake failed",
}

// resetHint explains a stream the server's gRPC reset with ENHANCE_YOUR_CALM, which carries no
// message of the server's: gRPC's resource quota, sized from --max_memory_bytes, refused the
// request while it arrived.
const resetHint = "the server reset the call before reading its request: its gRPC buffers of " +
	"requests still arriving were full, which --max_memory_bytes bounds; send smaller requests, " +
	"or fewer at once, or raise the server's --max_memory_bytes"

func (u unreachable) rewrite(err error) error {
	st, ok := status.FromError(err)
	if err != nil && ok && strings.Contains(st.Message(), "RST_STREAM with error code: ENHANCE_YOUR_CALM") {
		return status.Errorf(st.Code(), "%s [gRPC: %s]", resetHint, st.Message())
	}
	if err == nil || !ok || st.Code() != codes.Unavailable {
		return err
	}
	message := st.Message()
	if strings.Contains(message, "produced zero addresses") || strings.Contains(message, "no such host") {
		return status.Errorf(codes.Unavailable, "no tensorops server answers at %s: its host name does not resolve [gRPC: %s]",
			u.target, message)
	}
	found := false
	for _, pattern := range noConnection {
		found = found || strings.Contains(message, pattern)
	}
	if !found {
		return err
	}
	return status.Errorf(codes.Unavailable, "no tensorops server answers at %s (is it running?)%s [gRPC: %s]",
		u.target, u.hint(message), message)
}

// hint names the likely cause of a connection that failed with gRPC's `message`, or is "".
func (u unreachable) hint(message string) string {
	lowered := strings.ToLower(message)
	has := func(patterns ...string) bool {
		for _, pattern := range patterns {
			if strings.Contains(lowered, pattern) {
				return true
			}
		}
		return false
	}
	// What a connection closed by the other end looks like, as gRPC-Go reports it.
	closed := has("connection closed", "use of closed network connection", "eof", "connection reset", "broken pipe",
		"error reading server preface")
	switch {
	case u.tlsConfig == nil && closed:
		return "; the connection was closed as it opened, as a TLS server closes a plaintext client's: " +
			"if the server uses TLS (--tls_cert), dial WithTLS or WithTLSFiles"
	case u.tlsConfig == nil:
		return ""
	case has("first record does not look like a tls handshake", "wrong version number"):
		return "; the server at that address may not use TLS (a plaintext server: dial without WithTLS or WithTLSFiles)"
	case has("x509:", "certificate signed by unknown authority"):
		return "; its TLS certificate is not trusted or does not name the target: give the CA that signed it " +
			"(TLSFiles.RootCAFile) and TLSFiles.ServerName when the target is an IP address or another name"
	case !closed && !has("certificate required", "bad certificate", "unknown certificate"):
		return ""
	case len(u.tlsConfig.Certificates) == 0 && u.tlsConfig.GetClientCertificate == nil:
		return "; the connection was closed during the TLS handshake, as a server that requires client " +
			"certificates (--tls_client_ca) closes it for a client without one: give TLSFiles.CertFile and KeyFile"
	}
	return "; the connection was closed during the TLS handshake: the server may not accept this client " +
		"certificate (is it signed by the server's --tls_client_ca?)"
}

func (u unreachable) unary(ctx context.Context, method string, request, reply interface{}, conn *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return u.rewrite(invoker(ctx, method, request, reply, conn, opts...))
}

func (u unreachable) stream(ctx context.Context, desc *grpc.StreamDesc, conn *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	stream, err := streamer(ctx, desc, conn, method, opts...)
	if err != nil {
		return nil, u.rewrite(err)
	}
	return unreachableStream{stream, u}, nil
}

// unreachableStream rewrites the errors of a stream's messages (a connection can fail after
// the stream was created).
type unreachableStream struct {
	grpc.ClientStream
	u unreachable
}

func (s unreachableStream) SendMsg(m interface{}) error {
	return s.u.rewrite(s.ClientStream.SendMsg(m))
}

func (s unreachableStream) RecvMsg(m interface{}) error {
	return s.u.rewrite(s.ClientStream.RecvMsg(m))
}
