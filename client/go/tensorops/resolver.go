package tensorops

import (
	"context"
	"net"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"
)

// addressListScheme is the resolver scheme Dial uses for a target that lists its replicas.
const addressListScheme = "tensorops-addresses"

// addressListTarget turns gRPC C-core's address-list targets, "ipv4:host:port,host:port" and
// "ipv6:[host]:port,...", which gRPC-Go has no resolver for, into a target of the static resolver
// below, so that the C++, Python and Go clients accept the same targets. Other targets come back
// unchanged, with ok false.
func addressListTarget(target string) (string, bool, error) {
	var list string
	switch {
	case strings.HasPrefix(target, "ipv4:"):
		list = strings.TrimPrefix(target, "ipv4:")
	case strings.HasPrefix(target, "ipv6:"):
		list = strings.TrimPrefix(target, "ipv6:")
	default:
		return target, false, nil
	}
	for _, address := range strings.Split(list, ",") {
		if _, _, err := net.SplitHostPort(address); err != nil {
			return "", false, status.Errorf(codes.InvalidArgument, "tensorops: target %q: %v", target, err)
		}
	}
	return addressListScheme + ":///" + list, true, nil
}

// addressListBuilder resolves "tensorops-addresses:///a,b,c" to the addresses a, b and c, once.
type addressListBuilder struct{}

func (addressListBuilder) Build(target resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	var addresses []resolver.Address
	for _, address := range strings.Split(target.Endpoint, ",") {
		addresses = append(addresses, resolver.Address{Addr: address})
	}
	cc.UpdateState(resolver.State{Addresses: addresses})
	return addressListResolver{}, nil
}

func (addressListBuilder) Scheme() string { return addressListScheme }

type addressListResolver struct{}

func (addressListResolver) ResolveNow(resolver.ResolveNowOptions) {}
func (addressListResolver) Close()                                {}

// unixAbstractPrefix starts gRPC C-core's targets of a socket in Linux's abstract namespace.
const unixAbstractPrefix = "unix-abstract:"

// unixAbstractTarget turns a "unix-abstract:NAME" target, which gRPC-Go before 1.40 has no
// resolver for, into a target and a dialer that reach the socket NAME in the abstract namespace,
// so that the C++, Python and Go clients accept the same targets. The connection's authority (the
// name a TLS certificate is checked against unless TLSFiles.ServerName says otherwise) is
// "localhost", as gRPC C-core's is for Unix sockets. "unix:PATH" targets need nothing: gRPC-Go
// dials them itself. Other targets come back unchanged, with a nil option.
func unixAbstractTarget(target string) (string, grpc.DialOption, error) {
	if !strings.HasPrefix(target, unixAbstractPrefix) {
		return target, nil, nil
	}
	name := strings.TrimPrefix(target, unixAbstractPrefix)
	if name == "" {
		return "", nil, status.Errorf(codes.InvalidArgument, "tensorops: target %q names no socket (expected unix-abstract:NAME)", target)
	}
	dial := func(ctx context.Context, _ string) (net.Conn, error) {
		var dialer net.Dialer
		// Go's net package spells the abstract namespace with a leading '@'.
		return dialer.DialContext(ctx, "unix", "@"+name)
	}
	return "passthrough:///localhost", grpc.WithContextDialer(dial), nil
}
