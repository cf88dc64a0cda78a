// The standard gRPC tooling on the API listener (tooling.go). Goal: what
// grpcurl and a Kubernetes gRPC probe do works with no proto files at
// hand. Method: a real node behind h2c; TestTooling_Reflection does what
// `grpcurl -H 'Authorization: Bearer KEY' list / describe / call` does —
// lists the services through grpc.reflection.v1, downloads the descriptor
// of termivar.v1.Admin, and calls Admin/Status over gRPC with dynamic
// messages built only from those descriptors; without a key reflection is
// refused. TestTooling_Health checks grpc.health.v1 without a key.
package server

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/termivar/distributed/internal/apikey"
)

// h2cClient speaks HTTP/2 without TLS (gRPC's bidi streams need HTTP/2),
// adding the bearer key to every request as grpcurl's -H does.
func h2cClient(key string) *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	return &http.Client{Transport: keyTransport{key: key, next: tr}}
}

type keyTransport struct {
	key  string
	next http.RoundTripper
}

func (k keyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if k.key != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+k.key)
	}
	return k.next.RoundTrip(r)
}

func reflectionStream(ctx context.Context, b *testBundle, key string) *grpcreflect.ClientStream {
	return grpcreflect.NewClient(h2cClient(key), b.srv.URL, connect.WithGRPC()).NewStream(ctx)
}

func TestTooling_Reflection(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rs := reflectionStream(ctx, b, b.adminKey)
	defer rs.Close()
	names, err := rs.ListServices()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []protoreflect.FullName{"termivar.v1.Worker", "termivar.v1.Producer", "termivar.v1.Admin",
		"termivar.v1.Cluster", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
		if !slices.Contains(names, want) {
			t.Errorf("list services = %v, missing %s", names, want)
		}
	}
	files, err := rs.FileContainingSymbol("termivar.v1.Admin")
	if err != nil {
		t.Fatal(err)
	}
	reg, err := protodesc.NewFiles(&descriptorpb.FileDescriptorSet{File: files})
	if err != nil {
		t.Fatalf("descriptors from reflection do not build: %v", err)
	}
	d, err := reg.FindDescriptorByName("termivar.v1.Admin.Status")
	if err != nil {
		t.Fatalf("describe termivar.v1.Admin: %v", err)
	}
	md := d.(protoreflect.MethodDescriptor)
	if md.Input().FullName() != "termivar.v1.StatusRequest" || md.Output().FullName() != "termivar.v1.StatusResponse" {
		t.Fatalf("Status is %s -> %s", md.Input().FullName(), md.Output().FullName())
	}
	out := callDynamic(t, ctx, b, md)
	if got := out.Get(md.Output().Fields().ByName("node_id")).String(); got != b.node.NodeID() {
		t.Errorf("Status.node_id = %q, want %q", got, b.node.NodeID())
	}
	build := out.Get(md.Output().Fields().ByName("build")).Message()
	if gv := build.Get(build.Descriptor().Fields().ByName("go_version")).String(); gv == "" {
		t.Error("Status.build.go_version is empty")
	}
}

// callDynamic calls md over gRPC with messages built from md alone.
func callDynamic(t *testing.T, ctx context.Context, b *testBundle, md protoreflect.MethodDescriptor) *dynamicpb.Message {
	t.Helper()
	c := connect.NewClient[dynamicpb.Message, dynamicpb.Message](h2cClient(b.adminKey),
		b.srv.URL+"/"+string(md.Parent().FullName())+"/"+string(md.Name()),
		connect.WithGRPC(), connect.WithSchema(md),
		connect.WithResponseInitializer(func(_ connect.Spec, msg any) error {
			*msg.(*dynamicpb.Message) = *dynamicpb.NewMessage(md.Output())
			return nil
		}))
	res, err := c.CallUnary(ctx, connect.NewRequest(dynamicpb.NewMessage(md.Input())))
	if err != nil {
		t.Fatalf("call %s: %v", md.FullName(), err)
	}
	return res.Msg
}

func TestTooling_ReflectionNeedsKey(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	unknown, err := apikey.Generate(nil) // well-formed, never registered
	if err != nil {
		t.Fatal(err)
	}
	for name, key := range map[string]string{"no key": "", "unknown key": unknown.Key} {
		rs := reflectionStream(ctx, b, key)
		_, err := rs.ListServices()
		rs.Close()
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("%s: list services = %v, want unauthenticated", name, err)
		}
	}
}

func TestTooling_Health(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hc := grpchealth.NewClient(h2cClient(""), b.srv.URL, connect.WithGRPC())
	for _, svc := range []string{"", "termivar.v1.Worker", "termivar.v1.Admin"} {
		res, err := hc.Check(ctx, &grpchealth.CheckRequest{Service: svc})
		if err != nil || res.Status != grpchealth.StatusServing {
			t.Errorf("Check(%q) = %v, %v; want SERVING", svc, res, err)
		}
	}
	if _, err := hc.Check(ctx, &grpchealth.CheckRequest{Service: "no.such.Service"}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("Check(unknown) = %v, want not_found", err)
	}
}
