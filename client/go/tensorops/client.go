// Package tensorops is the Go client of the tensorops service: scatter/gather tensor operations
// over gRPC.
//
// A Client sends each op through that op's own RPC and returns the result as a Tensor. Tensors are
// built from Go slices and read back the same way:
//
//	client, err := tensorops.Dial("127.0.0.1:50051")
//	if err != nil { ... }
//	defer client.Close()
//	input := tensorops.FromFloat32([]float32{1, 2, 3, 4}, 2, 2)
//	index := tensorops.FromInt64([]int64{0, 0, 1, 0}, 2, 2)
//	out, err := client.Gather(ctx, input, 1, index) // out.Float32s() == [1 1 4 3]
//
// The server's tensor store keeps tensors by name: Put uploads one in chunks and returns a
// reference (a Tensor that names it), which any op accepts in place of a tensor; Get, List, Info
// and Delete do the rest. Every op's options struct has a Result field (ResultOptions) that
// stores the result under a name or updates a stored input in place, safely retried through an
// update id.
//
// A client on the server's host can share memory with it (CreateSharedMemoryRegion): tensor
// arguments in a region (InSharedMemory, SharedMemory.Write), results written into one
// (ResultOptions.SharedMemory), and Put from and Get into one, so that their bytes skip the
// socket.
//
// Errors from calls are the gRPC status errors of the call, unwrapped, so status.Code(err) and
// status.FromError(err) give the server's code (codes.InvalidArgument for bad input) and message.
// A call that reaches no server is Unavailable with the message "no tensorops server answers at
// TARGET (is it running?)" (see Dial). Deadlines and cancellation come from the context.
//
// A Client from Dial retries a call that fails with Unavailable, a server's Canceled or Aborted,
// up to 5 attempts (WithLoadBalancing), within the call's deadline: every unary call and Get, but
// not Put, Delete, RegisterSharedMemory and UnregisterSharedMemory (ServiceConfig says why), nor
// RunStream's streams. The Client makes these retries itself, so they happen with every gRPC-Go
// version and need no GRPC_GO_RETRY=on (gRPC-Go before 1.40 applies a service config's retry
// policy only with that variable set when the program starts); a Client from NewClient leaves
// retries to its connection.
//
// The stubs in tensorops/v1 are generated from proto/tensorops/v1 by ../generate.sh.
package tensorops

//go:generate ../generate.sh

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	tensoropsv1 "tensorops/client/go/tensorops/v1"
)

// DefaultMaxMessageBytes is the largest message a Client sends or receives unless
// WithMaxMessageBytes says otherwise: 1 GiB, the server's default --max_message_bytes.
const DefaultMaxMessageBytes = 1 << 30

// TLSFiles names the PEM files of a TLS channel. Every field is optional.
type TLSFiles struct {
	// CA certificate(s) the server's certificate must chain to; empty trusts the system's roots.
	RootCAFile string
	// Certificate chain and private key this client presents, for servers that require client
	// certificates (mutual TLS). Both or neither.
	CertFile string
	KeyFile  string
	// The name the server's certificate is checked against instead of the target's host; empty:
	// the target's host.
	ServerName string
}

// Option configures Dial or NewClient; the With* functions make them.
type Option struct {
	apply func(*settings) error
}

type settings struct {
	tlsConfig *tls.Config
	token     string
	// The option that set token ("WithBearerToken" or "WithBearerTokenFile"), to refuse both.
	tokenOption     string
	maxMessageBytes int
	dialOptions     []grpc.DialOption
	serviceConfig   string // "": Dial uses ServiceConfig(true, MaxAttemptsCap).
	maxAttempts     int    // 0: MaxAttemptsCap.
}

// WithTLS makes Dial open a TLS channel with the given configuration (nil: Go's defaults, the
// system's roots). Without it the channel is plaintext. NewClient rejects it: the connection is
// the caller's.
func WithTLS(config *tls.Config) Option {
	return Option{func(s *settings) error {
		if config == nil {
			config = &tls.Config{}
		}
		s.tlsConfig = config
		return nil
	}}
}

// WithTLSFiles is WithTLS with a configuration read from PEM files. Dial fails with
// InvalidArgument if a file cannot be read or parsed.
func WithTLSFiles(files TLSFiles) Option {
	return Option{func(s *settings) error {
		config := &tls.Config{ServerName: files.ServerName}
		if files.RootCAFile != "" {
			pem, err := os.ReadFile(files.RootCAFile)
			if err != nil {
				return status.Errorf(codes.InvalidArgument, "tensorops: root CA: %v", err)
			}
			config.RootCAs = x509.NewCertPool()
			if !config.RootCAs.AppendCertsFromPEM(pem) {
				return status.Errorf(codes.InvalidArgument, "tensorops: no PEM certificate in %s", files.RootCAFile)
			}
		}
		if (files.CertFile == "") != (files.KeyFile == "") {
			return status.Error(codes.InvalidArgument, "tensorops: give both CertFile and KeyFile or neither")
		}
		if files.CertFile != "" {
			certificate, err := tls.LoadX509KeyPair(files.CertFile, files.KeyFile)
			if err != nil {
				return status.Errorf(codes.InvalidArgument, "tensorops: client certificate: %v", err)
			}
			config.Certificates = []tls.Certificate{certificate}
		}
		s.tlsConfig = config
		return nil
	}}
}

// tokenRule is what a bearer token may hold, in the errors of WithBearerToken and
// WithBearerTokenFile.
const tokenRule = "a bearer token is one or more visible ASCII characters (0x21 to 0x7E) once the whitespace around it is stripped"

// checkedToken returns token without the whitespace around it, or an InvalidArgument error that
// names `what` and the rule. No error shows the token or any part of it: it is a secret.
func checkedToken(what, token string) (string, error) {
	token = strings.TrimSpace(token)
	if token == "" {
		return "", status.Errorf(codes.InvalidArgument,
			"tensorops: %s is not a valid bearer token: %s, and this one is empty (the token is not shown)", what, tokenRule)
	}
	for i := 0; i < len(token); i++ {
		if token[i] < 0x21 || token[i] > 0x7E {
			return "", status.Errorf(codes.InvalidArgument,
				"tensorops: %s is not a valid bearer token: %s, and this one has a character outside that range (the token is not shown)", what, tokenRule)
		}
	}
	return token, nil
}

// setToken records the token an option gives; a second option giving one is InvalidArgument.
func (s *settings) setToken(option, token string) error {
	if s.tokenOption != "" && s.tokenOption != option {
		return status.Errorf(codes.InvalidArgument,
			"tensorops: give WithBearerToken or WithBearerTokenFile, not both")
	}
	s.token, s.tokenOption = token, option
	return nil
}

// WithBearerToken sends "authorization: Bearer <token>" on every call, for servers started with
// --auth_token_file. The whitespace around token (a trailing newline, say) is stripped; what is
// left must be visible ASCII, 0x21 to 0x7E, and not empty, else Dial fails with InvalidArgument
// (its message does not show the token). Over a plaintext channel anyone who can see the traffic
// can read it. It and WithBearerTokenFile exclude each other.
func WithBearerToken(token string) Option {
	return Option{func(s *settings) error {
		token, err := checkedToken("WithBearerToken's token", token)
		if err != nil {
			return err
		}
		return s.setToken("WithBearerToken", token)
	}}
}

// WithBearerTokenFile is WithBearerToken with the token read from the file at path, stripped of
// the whitespace around it (as `echo TOKEN > file` leaves a newline), so that it stays out of the
// program's source and command line. Dial fails with InvalidArgument naming the path when the
// file cannot be read or holds no valid token; no message shows what the file holds.
func WithBearerTokenFile(path string) Option {
	return Option{func(s *settings) error {
		contents, err := os.ReadFile(path)
		if err != nil {
			// A *PathError: the operation, the path and the reason.
			return status.Errorf(codes.InvalidArgument, "tensorops: WithBearerTokenFile: cannot read the token: %v", err)
		}
		token, err := checkedToken(fmt.Sprintf("the token in WithBearerTokenFile's %s", path), string(contents))
		if err != nil {
			return err
		}
		return s.setToken("WithBearerTokenFile", token)
	}}
}

// WithMaxMessageBytes sets the largest message sent or received, 1 to 2^31 - 1 bytes (else
// InvalidArgument); larger results fail with ResourceExhausted.
func WithMaxMessageBytes(n int) Option {
	return Option{func(s *settings) error {
		if n < 1 || int64(n) > 1<<31-1 {
			return status.Errorf(codes.InvalidArgument, "tensorops: max message bytes %d is not in 1..2^31-1", n)
		}
		s.maxMessageBytes = n
		return nil
	}}
}

// MaxAttemptsCap is the most attempts a retry policy may give a call: gRPC clamps larger values.
const MaxAttemptsCap = 5

// ServiceConfig returns the gRPC service config (JSON) Dial gives its connection; the C++ and
// Python clients use the same. roundRobin: spread calls over every address the target resolves to
// (a DNS name with one record per replica, "dns:///tensorops-headless:50051", or a list,
// "ipv4:10.0.0.1:50051,10.0.0.2:50051"); false: gRPC's pick_first. maxAttempts: attempts a call
// gets when it fails with Unavailable (a replica shutting down) or with Canceled from the server
// (gRPC's server cancels calls it has not yet handed to the service when it shuts down), the
// first included, 1 (no retries) to MaxAttemptsCap; others are InvalidArgument. Calls whose
// context ends are not retried.
//
// A retry is safe for every call but four: ops are free of side effects or, when they store their
// result or update in place, carry an update id the server applies once (the client picks one
// per call and gRPC resends the same request). PutTensor and DeleteTensor change the store
// without one, so the config never retries them: a put or delete whose answer was lost could
// otherwise replace or remove a value another client stored in between. Nor
// RegisterSharedMemory and UnregisterSharedMemory, whose retry after a lost answer would fail
// with ALREADY_EXISTS or NOT_FOUND though the first attempt did what was asked.
//
// gRPC-Go before 1.40 (Debian 12 has 1.33) ignores retry policies unless the environment has
// GRPC_GO_RETRY=on when the program starts; round_robin works either way. Dial therefore turns
// gRPC's own retries off and makes this policy's retries in the Client (see the package
// comment); a connection of your own with this config (NewClient) retries only where gRPC does.
func ServiceConfig(roundRobin bool, maxAttempts int) (string, error) {
	if maxAttempts < 1 || maxAttempts > MaxAttemptsCap {
		return "", status.Errorf(codes.InvalidArgument, "tensorops: max attempts %d is not in 1..%d", maxAttempts, MaxAttemptsCap)
	}
	policy := "pick_first"
	if roundRobin {
		policy = "round_robin"
	}
	retry := ""
	if maxAttempts > 1 {
		retry = fmt.Sprintf(`,"retryPolicy":{"maxAttempts":%d,"initialBackoff":"0.05s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE","CANCELLED","ABORTED"]}`, maxAttempts)
	}
	never := make([]string, len(neverRetried))
	for i, method := range neverRetried {
		never[i] = fmt.Sprintf(`{"service":%q,"method":%q}`, serviceName, method)
	}
	return fmt.Sprintf(`{"loadBalancingConfig":[{%q:{}}],"methodConfig":[{"name":[{"service":%q}]%s},{"name":[%s]}]}`,
		policy, serviceName, retry, strings.Join(never, ",")), nil
}

// WithLoadBalancing sets how Dial's connection spreads calls over replicas and how many attempts
// the Client gives a call that fails with Unavailable (see ServiceConfig and the package
// comment); without it, round_robin and 5 attempts.
func WithLoadBalancing(roundRobin bool, maxAttempts int) Option {
	return Option{func(s *settings) error {
		config, err := ServiceConfig(roundRobin, maxAttempts)
		if err != nil {
			return err
		}
		s.serviceConfig, s.maxAttempts = config, maxAttempts
		return nil
	}}
}

// WithDialOptions passes more options to grpc.Dial (interceptors, keepalive, ...). Interceptors
// given with grpc.WithChainUnaryInterceptor see each attempt of a retried call.
func WithDialOptions(options ...grpc.DialOption) Option {
	return Option{func(s *settings) error {
		s.dialOptions = append(s.dialOptions, options...)
		return nil
	}}
}

// bearerToken is the token as per-call credentials. gRPC-Go sends these on plaintext channels too
// because RequireTransportSecurity says false.
type bearerToken string

func (t bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

func (bearerToken) RequireTransportSecurity() bool { return false }

// Client calls a tensorops server. Its methods may be called from many goroutines at once.
type Client struct {
	conn            *grpc.ClientConn // nil when the connection is the caller's (NewClient).
	stub            tensoropsv1.TensorOpsClient
	callOpts        []grpc.CallOption
	maxMessageBytes int
	retry           *retrier // nil when the connection is the caller's: gRPC's retries, if any.
}

func applyOptions(opts []Option) (*settings, error) {
	s := &settings{maxMessageBytes: DefaultMaxMessageBytes}
	for _, option := range opts {
		if err := option.apply(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func newClient(conn grpc.ClientConnInterface, s *settings) *Client {
	client := &Client{
		stub:            tensoropsv1.NewTensorOpsClient(conn),
		maxMessageBytes: s.maxMessageBytes,
		callOpts: []grpc.CallOption{
			grpc.MaxCallRecvMsgSize(s.maxMessageBytes), grpc.MaxCallSendMsgSize(s.maxMessageBytes),
		},
	}
	if s.token != "" {
		client.callOpts = append(client.callOpts, grpc.PerRPCCredentials(bearerToken(s.token)))
	}
	return client
}

// Dial returns a Client of the server at target ("host:port", or any gRPC target; a server's
// Unix socket as "unix:PATH" or "unix:///PATH", or "unix-abstract:NAME"; several replicas as
// "dns:///name:port" or, as gRPC C-core spells a list, "ipv4:host:port,host:port" or
// "ipv6:[host]:port,...", which Dial resolves itself; see WithLoadBalancing). Like
// grpc.Dial it does not wait for the connection: a server that is down shows as Unavailable on
// the first call, with the message "no tensorops server answers at TARGET (is it running?)", a
// hint when the connection was closed as it was set up (a TLS mismatch: a plaintext client of a
// TLS server, or a server that requires a client certificate) and gRPC's own message in
// brackets. It fails only for invalid options (InvalidArgument). The Client retries calls that
// fail with Unavailable, a server's Canceled or Aborted, itself (see the package comment), with
// no need for GRPC_GO_RETRY=on.
func Dial(target string, opts ...Option) (*Client, error) {
	s, err := applyOptions(opts)
	if err != nil {
		return nil, err
	}
	// grpc.WithInsecure: gRPC-Go 1.33 (Debian 12's) has no credentials/insecure package yet.
	transport := grpc.WithInsecure()
	if s.tlsConfig != nil {
		transport = grpc.WithTransportCredentials(credentials.NewTLS(s.tlsConfig))
	}
	// Calls that reach no server say so, naming the target as the caller gave it.
	noServer := unreachable{target: target, tlsConfig: s.tlsConfig}
	target, isList, err := addressListTarget(target)
	if err != nil {
		return nil, err
	}
	if isList {
		s.dialOptions = append([]grpc.DialOption{grpc.WithResolvers(addressListBuilder{})}, s.dialOptions...)
	}
	target, unixAbstractDialer, err := unixAbstractTarget(target)
	if err != nil {
		return nil, err
	}
	if unixAbstractDialer != nil {
		s.dialOptions = append([]grpc.DialOption{unixAbstractDialer}, s.dialOptions...)
	}
	serviceConfig := s.serviceConfig
	if serviceConfig == "" {
		serviceConfig, _ = ServiceConfig(true, MaxAttemptsCap)
	}
	if s.maxAttempts == 0 {
		s.maxAttempts = MaxAttemptsCap
	}
	// The retries are the Client's (retrier): gRPC's own, which gRPC-Go 1.33 makes only with
	// GRPC_GO_RETRY=on, are off so that no call is retried by both.
	retry := newRetrier(s.maxAttempts)
	conn, err := grpc.Dial(target, append([]grpc.DialOption{
		transport, grpc.WithDefaultServiceConfig(serviceConfig), grpc.WithDisableRetry(),
		grpc.WithChainUnaryInterceptor(noServer.unary, retry.unary), grpc.WithChainStreamInterceptor(noServer.stream),
	}, s.dialOptions...)...)
	if err != nil {
		return nil, err
	}
	client := newClient(conn, s)
	client.conn, client.retry = conn, retry
	return client, nil
}

// NewClient returns a Client that calls through conn, which the caller owns: Close leaves it
// open. WithBearerToken, WithBearerTokenFile and WithMaxMessageBytes apply; WithTLS,
// WithTLSFiles, WithLoadBalancing and WithDialOptions configure a connection that Dial opens, so
// NewClient fails with InvalidArgument when given them. Its calls' errors are gRPC's as they come
// (Dial's rewrite of "no server answers" errors is an interceptor of the connection it opens),
// and it makes no retries of its own: those are conn's (gRPC-Go before 1.40 applies a service
// config's retry policy only with GRPC_GO_RETRY=on in the environment when the program starts).
func NewClient(conn grpc.ClientConnInterface, opts ...Option) (*Client, error) {
	s, err := applyOptions(opts)
	if err != nil {
		return nil, err
	}
	if s.tlsConfig != nil || len(s.dialOptions) > 0 || s.serviceConfig != "" {
		return nil, status.Error(codes.InvalidArgument,
			"tensorops: NewClient: TLS, load balancing and dial options belong to the connection; set them where it is dialed")
	}
	return newClient(conn, s), nil
}

// Close closes the connection Dial opened; calls in flight fail with Canceled. For a Client from
// NewClient it does nothing.
func (c *Client) Close() error {
	if c.conn == nil {
		return nil
	}
	return c.conn.Close()
}

// Stub returns the generated gRPC client the methods call, with none of this Client's per-call
// options (token, message limit): pass CallOptions() to its methods.
func (c *Client) Stub() tensoropsv1.TensorOpsClient { return c.stub }

// CallOptions returns the per-call options every method of c passes: the message limits and the
// bearer token.
func (c *Client) CallOptions() []grpc.CallOption { return append([]grpc.CallOption{}, c.callOpts...) }

// unary returns the result of op's unary call: a tensor in shared memory when op's result was
// written into a region.
func unary(op Op, response interface{ GetResult() *tensoropsv1.Tensor }, err error) (Tensor, error) {
	if err != nil {
		return Tensor{}, err
	}
	if shared := op.resultOptions().GetSharedMemory(); shared != nil {
		return resultIn(response.GetResult(), shared)
	}
	return result(response.GetResult())
}

// result decodes a result tensor; a malformed one (which a correct server never sends) is
// Internal.
func result(message *tensoropsv1.Tensor) (Tensor, error) {
	tensor, err := FromProto(message)
	if err != nil {
		return Tensor{}, status.Errorf(codes.Internal, "tensorops: malformed result: %v", err)
	}
	return tensor, nil
}

// Gather returns torch.gather(input, axis, index): result[i][j] = input[i][index[i][j]] for
// axis 1.
func (c *Client) Gather(ctx context.Context, input Tensor, axis int64, index Tensor, opts ...GatherOptions) (Tensor, error) {
	op := withUpdateID(GatherOp(input, axis, index, opts...), true)
	response, err := c.stub.Gather(ctx, op.message.GetGather(), c.callOpts...)
	return unary(op, response, err)
}

// Scatter returns torch.scatter(input, axis, index, src), or scatter_reduce with opts.Reduce.
func (c *Client) Scatter(ctx context.Context, input Tensor, axis int64, index Tensor, src Tensor, opts ...ScatterOptions) (Tensor, error) {
	return c.scatter(ctx, ScatterOp(input, axis, index, src, opts...))
}

// ScatterValue is Scatter with one scalar value in place of every source element.
func (c *Client) ScatterValue(ctx context.Context, input Tensor, axis int64, index Tensor, value Scalar, opts ...ScatterOptions) (Tensor, error) {
	return c.scatter(ctx, ScatterValueOp(input, axis, index, value, opts...))
}

func (c *Client) scatter(ctx context.Context, op Op) (Tensor, error) {
	op = withUpdateID(op, true)
	response, err := c.stub.Scatter(ctx, op.message.GetScatter(), c.callOpts...)
	return unary(op, response, err)
}

// IndexSelect returns torch.index_select(input, axis, index); index is 1-D (or a scalar).
func (c *Client) IndexSelect(ctx context.Context, input Tensor, axis int64, index Tensor, opts ...IndexSelectOptions) (Tensor, error) {
	op := withUpdateID(IndexSelectOp(input, axis, index, opts...), true)
	response, err := c.stub.IndexSelect(ctx, op.message.GetIndexSelect(), c.callOpts...)
	return unary(op, response, err)
}

// IndexReduce returns torch.index_add (the default, Reduce: Sum, with Alpha), index_copy
// (Reduce: Assign) or index_reduce (Prod, Mean, AMax, AMin) of input along axis.
func (c *Client) IndexReduce(ctx context.Context, input Tensor, axis int64, index Tensor, src Tensor, opts ...IndexReduceOptions) (Tensor, error) {
	op := withUpdateID(IndexReduceOp(input, axis, index, src, opts...), true)
	response, err := c.stub.IndexReduce(ctx, op.message.GetIndexReduce(), c.callOpts...)
	return unary(op, response, err)
}

// SelectScatter returns torch.select_scatter(input, src, axis, index).
func (c *Client) SelectScatter(ctx context.Context, input Tensor, src Tensor, axis int64, index int64, opts ...SelectScatterOptions) (Tensor, error) {
	op := withUpdateID(SelectScatterOp(input, src, axis, index, opts...), true)
	response, err := c.stub.SelectScatter(ctx, op.message.GetSelectScatter(), c.callOpts...)
	return unary(op, response, err)
}

// SliceScatter returns torch.slice_scatter(input, src, axis, start, end, step).
func (c *Client) SliceScatter(ctx context.Context, input Tensor, src Tensor, axis int64, opts ...SliceScatterOptions) (Tensor, error) {
	op := withUpdateID(SliceScatterOp(input, src, axis, opts...), true)
	response, err := c.stub.SliceScatter(ctx, op.message.GetSliceScatter(), c.callOpts...)
	return unary(op, response, err)
}

// DiagonalScatter returns torch.diagonal_scatter(input, src, offset, axis1, axis2).
func (c *Client) DiagonalScatter(ctx context.Context, input Tensor, src Tensor, opts ...DiagonalScatterOptions) (Tensor, error) {
	op := withUpdateID(DiagonalScatterOp(input, src, opts...), true)
	response, err := c.stub.DiagonalScatter(ctx, op.message.GetDiagonalScatter(), c.callOpts...)
	return unary(op, response, err)
}

// GatherNd returns tf.gather_nd(input, index, batch_dims), or the axes form (docs/semantics.md,
// GatherNd).
func (c *Client) GatherNd(ctx context.Context, input Tensor, index Tensor, opts ...GatherNdOptions) (Tensor, error) {
	op := withUpdateID(GatherNdOp(input, index, opts...), true)
	response, err := c.stub.GatherNd(ctx, op.message.GetGatherNd(), c.callOpts...)
	return unary(op, response, err)
}

// ScatterNd returns tf.tensor_scatter_nd_update(input, index, src), or _add / _min / _max with
// opts.Reduce, or the axes form.
func (c *Client) ScatterNd(ctx context.Context, input Tensor, index Tensor, src Tensor, opts ...ScatterNdOptions) (Tensor, error) {
	return c.scatterNd(ctx, ScatterNdOp(input, index, src, opts...))
}

// ScatterNdZeros is ScatterNd on zeros of `shape` in src's dtype with duplicate indices summed
// by default: paddle.scatter_nd (and tf.scatter_nd). opts.Reduce chooses another reduction
// (Assign: the last source in row-major order of the index wins).
func (c *Client) ScatterNdZeros(ctx context.Context, shape []int64, index Tensor, src Tensor, opts ...ScatterNdOptions) (Tensor, error) {
	return c.scatterNd(ctx, ScatterNdZerosOp(shape, index, src, opts...))
}

func (c *Client) scatterNd(ctx context.Context, op Op) (Tensor, error) {
	op = withUpdateID(op, true)
	response, err := c.stub.ScatterNd(ctx, op.message.GetScatterNd(), c.callOpts...)
	return unary(op, response, err)
}

// MaskedScatter returns torch.masked_scatter(input, mask, src).
func (c *Client) MaskedScatter(ctx context.Context, input Tensor, mask Tensor, src Tensor, opts ...MaskedScatterOptions) (Tensor, error) {
	op := withUpdateID(MaskedScatterOp(input, mask, src, opts...), true)
	response, err := c.stub.MaskedScatter(ctx, op.message.GetMaskedScatter(), c.callOpts...)
	return unary(op, response, err)
}

// Run runs any op through the generic Run RPC: the same validation and result as its own RPC.
// An op that stores its result without an UpdateID gets a fresh one on a copy of its request
// (inline tensors included), so that each Run of one Op is its own update.
func (c *Client) Run(ctx context.Context, op Op) (Tensor, error) {
	op = withUpdateID(op, false)
	response, err := c.stub.Run(ctx, op.message, c.callOpts...)
	return unary(op, response, err)
}

// Backward returns the gradients of op's differentiable inputs for gradOutput, the gradient of its
// result, by argument name ("input", "src"), as PyTorch autograd computes them. Index and mask
// tensors, and a scalar value, get none.
func (c *Client) Backward(ctx context.Context, op Op, gradOutput Tensor) (map[string]Tensor, error) {
	response, err := c.stub.Backward(ctx, &tensoropsv1.BackwardRequest{
		Op: op.message, GradOutput: gradOutput.Proto()}, c.callOpts...)
	if err != nil {
		return nil, err
	}
	gradients := make(map[string]Tensor, len(response.GetGradients()))
	for name, message := range response.GetGradients() {
		gradient, err := result(message)
		if err != nil {
			return nil, err
		}
		gradients[name] = gradient
	}
	return gradients, nil
}

// ServerInfo describes the server: version, build, devices, limits, ops and dtypes.
func (c *Client) ServerInfo(ctx context.Context) (*tensoropsv1.ServerInfoResponse, error) {
	return c.stub.ServerInfo(ctx, &tensoropsv1.ServerInfoRequest{}, c.callOpts...)
}

// StreamResult is the outcome of one request on a Stream.
type StreamResult struct {
	// The id the request was sent with.
	RequestID uint64
	// The result when Err is nil.
	Result Tensor
	// The request's own failure, a gRPC status error like a unary call's; the stream goes on.
	Err error
}

// Stream is a RunStream call: a pipeline of ops over one stream. One goroutine may Send while
// another Receives; neither method may be called from two goroutines at once.
type Stream struct {
	stream tensoropsv1.TensorOps_RunStreamClient

	mu sync.Mutex
	// The region each request in flight writes its result into, by request id, for Recv to
	// describe the result (the response has only its dtype and shape).
	sharedResults map[uint64]*tensoropsv1.SharedMemoryRef
}

// RunStream opens a stream; cancelling ctx ends it. Each request sent gets exactly one result
// with its id, in completion order (not necessarily the order sent).
func (c *Client) RunStream(ctx context.Context) (*Stream, error) {
	stream, err := c.stub.RunStream(ctx, c.callOpts...)
	if err != nil {
		return nil, err
	}
	return &Stream{stream: stream, sharedResults: map[uint64]*tensoropsv1.SharedMemoryRef{}}, nil
}

// Send sends one op with the caller's id (an op that stores its result gets an update id as Run
// gives it). An error (io.EOF when the server ended the stream) means no more can be sent; Recv
// gives the stream's status.
func (s *Stream) Send(requestID uint64, op Op) error {
	if shared := op.resultOptions().GetSharedMemory(); shared != nil {
		s.mu.Lock()
		s.sharedResults[requestID] = shared
		s.mu.Unlock()
	}
	return s.stream.Send(&tensoropsv1.RunStreamRequest{RequestId: requestID, Op: withUpdateID(op, false).message})
}

// CloseSend tells the server no more requests come; results keep arriving until Recv returns
// io.EOF.
func (s *Stream) CloseSend() error { return s.stream.CloseSend() }

// Recv returns the next result. It returns io.EOF once the stream ended OK (after CloseSend and
// every result), or the stream's gRPC status error (Unavailable when the server shuts down).
func (s *Stream) Recv() (StreamResult, error) {
	response, err := s.stream.Recv()
	if err != nil {
		return StreamResult{}, err
	}
	out := StreamResult{RequestID: response.GetRequestId()}
	s.mu.Lock()
	shared := s.sharedResults[out.RequestID]
	delete(s.sharedResults, out.RequestID)
	s.mu.Unlock()
	switch outcome := response.GetOutcome().(type) {
	case *tensoropsv1.RunStreamResponse_Result:
		if shared != nil {
			out.Result, out.Err = resultIn(outcome.Result, shared)
		} else {
			out.Result, out.Err = result(outcome.Result)
		}
	case *tensoropsv1.RunStreamResponse_Error:
		out.Err = status.Error(codes.Code(outcome.Error.GetCode()), outcome.Error.GetMessage())
	default:
		out.Err = status.Error(codes.Internal, fmt.Sprintf("tensorops: response %d has no outcome", out.RequestID))
	}
	return out, nil
}
