package statestore

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// MaxBlobBytes is the largest blob Save accepts: below the API server's
// 1 MiB ConfigMap limit with room for metadata and other keys.
const MaxBlobBytes = 900 << 10

// AnnotationSavedBy names the identity of the last writer.
const AnnotationSavedBy = "narwhal.io/state-saved-by"

var (
	// ErrNotFound: no blob under that key (or no ConfigMap at all).
	ErrNotFound = errors.New("statestore: not found")
	// ErrTooLarge: the blob exceeds MaxBlobBytes.
	ErrTooLarge = errors.New("statestore: blob too large")
	// ErrInvalidKey: the key is not a valid ConfigMap key.
	ErrInvalidKey = errors.New("statestore: invalid key")
	// ErrFenced: the fence refused the write (this replica is not leader).
	ErrFenced = errors.New("statestore: write fenced")
	// ErrInvalidConfig: New got a nil client or empty names.
	ErrInvalidConfig = errors.New("statestore: invalid config")
)

// Store reads and writes blobs in one ConfigMap.
type Store struct {
	client    kubernetes.Interface
	namespace string
	name      string
	identity  string
	fence     func() bool
}

// Option configures a Store.
type Option func(*Store)

// WithFence makes Save fail with ErrFenced whenever allowed returns false,
// e.g. an elector's IsLeader.
func WithFence(allowed func() bool) Option { return func(s *Store) { s.fence = allowed } }

// WithIdentity records who writes (annotation narwhal.io/state-saved-by).
func WithIdentity(id string) Option { return func(s *Store) { s.identity = id } }

// New returns a store backed by ConfigMap namespace/name. The ConfigMap is
// created by the first Save if it does not exist.
func New(client kubernetes.Interface, namespace, name string, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidConfig)
	}
	if namespace == "" || name == "" {
		return nil, fmt.Errorf("%w: namespace %q, name %q: both are required", ErrInvalidConfig, namespace, name)
	}
	s := &Store{client: client, namespace: namespace, name: name}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

func checkKey(key string) error {
	if errs := validation.IsConfigMapKey(key); len(errs) > 0 {
		return fmt.Errorf("%w: %q: %s", ErrInvalidKey, key, errs[0])
	}
	return nil
}

// Load returns the blob saved under key, or ErrNotFound.
func (s *Store) Load(ctx context.Context, key string) ([]byte, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	cm, err := s.client.CoreV1().ConfigMaps(s.namespace).Get(ctx, s.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: configmap %s/%s", ErrNotFound, s.namespace, s.name)
	}
	if err != nil {
		return nil, fmt.Errorf("statestore: get configmap %s/%s: %w", s.namespace, s.name, err)
	}
	if v, ok := cm.Data[key]; ok {
		return []byte(v), nil
	}
	if v, ok := cm.BinaryData[key]; ok {
		return append([]byte(nil), v...), nil
	}
	return nil, fmt.Errorf("%w: key %q in configmap %s/%s", ErrNotFound, key, s.namespace, s.name)
}

// Save writes blob under key, creating the ConfigMap if needed and
// retrying on write conflicts. Bad input changes nothing.
func (s *Store) Save(ctx context.Context, key string, blob []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if len(blob) > MaxBlobBytes {
		return fmt.Errorf("%w: %d bytes > %d", ErrTooLarge, len(blob), MaxBlobBytes)
	}
	cms := s.client.CoreV1().ConfigMaps(s.namespace)
	err := retry.OnError(retry.DefaultRetry, func(err error) bool {
		return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)
	}, func() error {
		if s.fence != nil && !s.fence() {
			return ErrFenced
		}
		cm, err := cms.Get(ctx, s.name, metav1.GetOptions{})
		create := apierrors.IsNotFound(err)
		if err != nil && !create {
			return err
		}
		if create {
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
				Namespace: s.namespace, Name: s.name,
				Labels: map[string]string{"app.kubernetes.io/part-of": "narwhal"},
			}}
		}
		put(cm, key, blob)
		if s.identity != "" {
			if cm.Annotations == nil {
				cm.Annotations = map[string]string{}
			}
			cm.Annotations[AnnotationSavedBy] = s.identity
		}
		if create {
			_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
		} else {
			_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		}
		return err
	})
	if errors.Is(err, ErrFenced) {
		return fmt.Errorf("statestore: save %q: %w", key, err)
	}
	if err != nil {
		return fmt.Errorf("statestore: save %q to configmap %s/%s: %w", key, s.namespace, s.name, err)
	}
	return nil
}

// put stores blob under key in the map that suits it and removes the key
// from the other.
func put(cm *corev1.ConfigMap, key string, blob []byte) {
	if utf8.Valid(blob) {
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[key] = string(blob)
		delete(cm.BinaryData, key)
		return
	}
	if cm.BinaryData == nil {
		cm.BinaryData = map[string][]byte{}
	}
	cm.BinaryData[key] = append([]byte(nil), blob...)
	delete(cm.Data, key)
}
