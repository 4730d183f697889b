// Package deploy holds the chart's rendered output, narwhal.yaml, for
// `kubectl apply -f deploy/narwhal.yaml` without Helm, and the tests that
// check the chart (charts/narwhal): every rendered object decodes strictly
// into client-go's types, the configurations it ships load in the
// binaries, and narwhal.yaml is what the chart renders today.
//
// narwhal.yaml is rendered with
//
//	helm template narwhal charts/narwhal -n narwhal --set auth.existingSecret=narwhal-token
//
// (no generated Secret, so the output is reproducible): create the token
// Secret and the namespace first (see charts/narwhal/README.md).
package deploy
