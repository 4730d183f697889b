package statestore

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func newStore(t *testing.T, opts ...Option) (*Store, *fake.Clientset) {
	t.Helper()
	cs := fake.NewSimpleClientset()
	s, err := New(cs, "narwhal", "narwhal-core-state", opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s, cs
}

func TestSaveLoadRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, cs := newStore(t, WithIdentity("core-0"))
	if _, err := s.Load(ctx, "controller.json"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Load before any save: got %v; want ErrNotFound", err)
	}
	f := func(key string, blob []byte) {
		t.Helper()
		if err := s.Save(ctx, key, blob); err != nil {
			t.Fatalf("Save(%q): %v", key, err)
		}
		got, err := s.Load(ctx, key)
		if err != nil {
			t.Fatalf("Load(%q): %v", key, err)
		}
		if !bytes.Equal(got, blob) {
			t.Fatalf("unexpected blob for %q; got %q; want %q", key, got, blob)
		}
	}
	f("controller.json", []byte(`{"roles":{"e1":"decode"}}`))
	f("binary", []byte{0xff, 0x00, 0xfe})
	f("controller.json", []byte(`{"roles":{"e1":"prefill"}}`)) // overwrite
	f("binary", []byte("now text"))                            // moves from binary_data to data

	cm, err := cs.CoreV1().ConfigMaps("narwhal").Get(ctx, "narwhal-core-state", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get configmap: %v", err)
	}
	if got := cm.Data["controller.json"]; got != `{"roles":{"e1":"prefill"}}` {
		t.Fatalf("unexpected data[controller.json]; got %q", got)
	}
	if _, ok := cm.BinaryData["binary"]; ok {
		t.Fatalf("binary_data still holds a key that became text")
	}
	if got := cm.Annotations[AnnotationSavedBy]; got != "core-0" {
		t.Fatalf("unexpected %s; got %q; want core-0", AnnotationSavedBy, got)
	}
	if _, err := s.Load(ctx, "other"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Load of a missing key: got %v; want ErrNotFound", err)
	}
}

func TestSaveRefusesBadInputAndChangesNothing(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	if err := s.Save(ctx, "k", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, "k", make([]byte, MaxBlobBytes+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversize save: got %v; want ErrTooLarge", err)
	}
	for _, key := range []string{"", "a/b", "sp ace", strings.Repeat("k", 254)} {
		if err := s.Save(ctx, key, []byte("x")); !errors.Is(err, ErrInvalidKey) {
			t.Fatalf("Save(%q): got %v; want ErrInvalidKey", key, err)
		}
		if _, err := s.Load(ctx, key); !errors.Is(err, ErrInvalidKey) {
			t.Fatalf("Load(%q): got %v; want ErrInvalidKey", key, err)
		}
	}
	got, err := s.Load(ctx, "k")
	if err != nil || string(got) != "v1" {
		t.Fatalf("after refused saves: got %q, %v; want v1", got, err)
	}
	if _, err := New(nil, "a", "b"); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("New(nil client): got %v; want ErrInvalidConfig", err)
	}
	if _, err := New(fakeClient(), "", "b"); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("New(empty namespace): got %v; want ErrInvalidConfig", err)
	}
}

func fakeClient() *fake.Clientset { return fake.NewSimpleClientset() }

func TestFenceBlocksWrites(t *testing.T) {
	ctx := context.Background()
	leading := true
	s, _ := newStore(t, WithFence(func() bool { return leading }))
	if err := s.Save(ctx, "k", []byte("leader")); err != nil {
		t.Fatal(err)
	}
	leading = false
	if err := s.Save(ctx, "k", []byte("stale")); !errors.Is(err, ErrFenced) {
		t.Fatalf("fenced save: got %v; want ErrFenced", err)
	}
	got, _ := s.Load(ctx, "k")
	if string(got) != "leader" {
		t.Fatalf("fenced save changed the blob: got %q", got)
	}
}

func TestSaveRetriesOnConflict(t *testing.T) {
	ctx := context.Background()
	s, cs := newStore(t)
	if err := s.Save(ctx, "a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	conflicts := 2
	cs.PrependReactor("update", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts > 0 {
			conflicts--
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, "narwhal-core-state", errors.New("modified"))
		}
		return false, nil, nil
	})
	if err := s.Save(ctx, "b", []byte("2")); err != nil {
		t.Fatalf("Save under conflicts: %v", err)
	}
	if conflicts != 0 {
		t.Fatalf("reactor not exhausted: %d conflicts left", conflicts)
	}
	for key, want := range map[string]string{"a": "1", "b": "2"} {
		got, err := s.Load(ctx, key)
		if err != nil || string(got) != want {
			t.Fatalf("Load(%q) = %q, %v; want %q", key, got, err, want)
		}
	}
}

func TestLoadReadsExistingBinaryData(t *testing.T) {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "narwhal", Name: "st"},
		BinaryData: map[string][]byte{"blob": {1, 2, 3}},
	}
	s, err := New(fake.NewSimpleClientset(cm), "narwhal", "st")
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Load(context.Background(), "blob")
	if err != nil || !bytes.Equal(got, []byte{1, 2, 3}) {
		t.Fatalf("Load = %v, %v; want [1 2 3]", got, err)
	}
}
