package profile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"github.com/narwhal-io/narwhal/core/controller"
)

// ErrFile is wrapped by every error about a profile file.
var ErrFile = errors.New("profile file")

// MaxFileBytes bounds a profile file.
const MaxFileBytes = 16 << 20

// File is the JSON layout of a profile file (profiles.file,
// --profiles): measured points per (model, GPU, TP), fitted when loaded,
// and optionally a model's Hugging Face config.json, whose geometry
// prices the phases without points (with the GPU from the built-in
// table). See README.md for an example.
type File struct {
	Profiles []FileEntry `json:"profiles"`
}

// FileEntry is one profile of a File.
type FileEntry struct {
	Model         string                    `json:"model"`
	GPU           string                    `json:"gpu"`
	TP            int                       `json:"tp"`
	Aliases       []string                  `json:"aliases,omitempty"`
	Source        string                    `json:"source"`
	PrefillPoints []controller.PrefillPoint `json:"prefill_points,omitempty"`
	DecodePoints  []controller.DecodePoint  `json:"decode_points,omitempty"`
	HFConfig      json.RawMessage           `json:"hf_config,omitempty"`
}

// LoadFile reads and fits a profile file. Errors name the file, the line
// and the field ("f.json:12: profiles[0].prefill_points[2].seconds: ...").
func LoadFile(path string) (*controller.ProfileSet, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFile, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrFile, path, err)
	}
	if len(b) > MaxFileBytes {
		return nil, fmt.Errorf("%w: %s: larger than %d bytes", ErrFile, path, MaxFileBytes)
	}
	return Parse(path, b)
}

// Parse is LoadFile of data already read; name is used in errors.
func Parse(name string, data []byte) (*controller.ProfileSet, error) {
	at := func(off int64) string { return fmt.Sprintf("%s:%d", name, lineOf(data, off)) }
	offs := map[string]int64{}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := walk(dec, data, "", offs, 0); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, fmt.Errorf("%w: %s: %w", ErrFile, at(se.Offset), err)
		}
		return nil, fmt.Errorf("%w: %s: %w", ErrFile, at(dec.InputOffset()), err)
	}
	fieldErr := func(path, format string, args ...any) error {
		off, ok := offs[path]
		for p := path; !ok && p != ""; {
			i := strings.LastIndexAny(p, ".[")
			if i < 0 {
				break
			}
			p = p[:i]
			off, ok = offs[p]
		}
		return fmt.Errorf("%w: %s: %s: %s", ErrFile, at(off), strings.TrimPrefix(path, "."), fmt.Sprintf(format, args...))
	}
	var file File
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(&file); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, fmt.Errorf("%w: %s: %s: want %s, got %s", ErrFile, at(te.Offset), te.Field, te.Type, te.Value)
		}
		if msg := err.Error(); strings.HasPrefix(msg, "json: unknown field ") {
			key := strings.Trim(strings.TrimPrefix(msg, "json: unknown field "), `"`)
			for p := range offs {
				if strings.HasSuffix(p, "."+key) && !strings.Contains(p, ".hf_config") {
					return nil, fieldErr(p, "unknown field")
				}
			}
		}
		return nil, fmt.Errorf("%w: %s: %w", ErrFile, name, err)
	}
	if len(file.Profiles) == 0 {
		return nil, fieldErr(".profiles", "at least one profile is required")
	}
	ps := make([]controller.Profile, 0, len(file.Profiles))
	for i, e := range file.Profiles {
		base := fmt.Sprintf(".profiles[%d]", i)
		if strings.TrimSpace(e.Model) == "" {
			return nil, fieldErr(base+".model", "required")
		}
		if strings.TrimSpace(e.GPU) == "" {
			return nil, fieldErr(base+".gpu", "required")
		}
		if e.TP < 0 || e.TP > 64 {
			return nil, fieldErr(base+".tp", "%d: want 0..64 (0: 1)", e.TP)
		}
		for j, p := range e.PrefillPoints {
			f := fmt.Sprintf("%s.prefill_points[%d]", base, j)
			if p.InputTokens <= 0 || p.InputTokens > 1<<24 {
				return nil, fieldErr(f+".input_tokens", "%d: want 1..%d", p.InputTokens, 1<<24)
			}
			if !(p.Seconds > 0) || p.Seconds > 3600 || math.IsInf(p.Seconds, 0) {
				return nil, fieldErr(f+".seconds", "%v: want > 0 and <= 3600", p.Seconds)
			}
		}
		for j, p := range e.DecodePoints {
			f := fmt.Sprintf("%s.decode_points[%d]", base, j)
			if p.Batch <= 0 || p.Batch > 1<<20 {
				return nil, fieldErr(f+".batch", "%d: want 1..%d", p.Batch, 1<<20)
			}
			if p.CtxTokens < 0 || p.CtxTokens > 1<<34 {
				return nil, fieldErr(f+".ctx_tokens", "%d: want 0..%d (context tokens over the whole batch)", p.CtxTokens, int64(1)<<34)
			}
			if !(p.Seconds > 0) || p.Seconds > 3600 || math.IsInf(p.Seconds, 0) {
				return nil, fieldErr(f+".seconds", "%v: want > 0 and <= 3600", p.Seconds)
			}
		}
		tp := max(e.TP, 1)
		var prior controller.Profile
		hasPrior := false
		if len(e.HFConfig) > 0 {
			g, err := FromHFConfig(e.Model, e.HFConfig)
			if err != nil {
				return nil, fieldErr(base+".hf_config", "%v", err)
			}
			gpu, ok := LookupGPU(e.GPU)
			if !ok {
				return nil, fieldErr(base+".gpu", "%q: not in the built-in GPU table (needed to price hf_config)", e.GPU)
			}
			pr, err := NewPrior(g, gpu, tp)
			if err == nil {
				prior, err = pr.Profile(e.Model, e.GPU)
			}
			if err != nil {
				return nil, fieldErr(base+".hf_config", "%v", err)
			}
			hasPrior = true
		}
		if len(e.PrefillPoints) == 0 && len(e.DecodePoints) == 0 && !hasPrior {
			return nil, fieldErr(base, "needs prefill_points, decode_points or hf_config")
		}
		pp := controller.ProfilePoints{Model: e.Model, GPU: e.GPU, Aliases: e.Aliases, TP: tp, Source: e.Source,
			PrefillPoints: e.PrefillPoints, DecodePoints: e.DecodePoints}
		if pp.Source == "" {
			pp.Source = name
		}
		p := controller.Profile{Model: e.Model, GPU: e.GPU, Aliases: e.Aliases, TP: tp, Source: pp.Source, Origin: controller.OriginMeasured}
		if len(e.PrefillPoints) > 0 {
			f, err := controller.FitPrefill(e.PrefillPoints)
			if err != nil {
				return nil, fieldErr(base+".prefill_points", "%v", err)
			}
			p.Prefill, p.HasPrefill = f, true
		}
		if len(e.DecodePoints) > 0 {
			f, err := controller.FitDecode(e.DecodePoints)
			if err != nil {
				return nil, fieldErr(base+".decode_points", "%v", err)
			}
			p.Decode, p.HasDecode = f, true
		}
		if hasPrior {
			if !p.HasPrefill {
				p.Prefill, p.HasPrefill = prior.Prefill, true
			}
			if !p.HasDecode {
				p.Decode, p.HasDecode = prior.Decode, true
			}
			if len(e.PrefillPoints)+len(e.DecodePoints) == 0 {
				p.Origin, p.Source = controller.OriginPrior, prior.Source
			} else {
				p.Source += "; phases without points: " + prior.Source
			}
		}
		ps = append(ps, p)
	}
	set, err := controller.NewProfileSet(ps...)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrFile, name, err)
	}
	return set, nil
}

// maxDepth bounds nesting while indexing a file.
const maxDepth = 64

// walk records the offset of every value by path (".profiles[0].gpu").
func walk(dec *json.Decoder, data []byte, path string, offs map[string]int64, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("nested deeper than %d", maxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			return errors.New("unexpected end of file")
		}
		return err
	}
	switch tok {
	case json.Delim('{'):
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return err
			}
			key, _ := kt.(string)
			p := path + "." + key
			if len(offs) < 1<<20 {
				offs[p] = skipSep(data, dec.InputOffset())
			}
			if err := walk(dec, data, p, offs, depth+1); err != nil {
				return err
			}
		}
		_, err = dec.Token()
		return err
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			p := fmt.Sprintf("%s[%d]", path, i)
			if len(offs) < 1<<20 {
				offs[p] = skipSep(data, dec.InputOffset())
			}
			if err := walk(dec, data, p, offs, depth+1); err != nil {
				return err
			}
		}
		_, err = dec.Token()
		return err
	}
	return nil
}

// skipSep moves off past white space, ':' and ',' to the next value.
func skipSep(data []byte, off int64) int64 {
	for off < int64(len(data)) {
		switch data[off] {
		case ' ', '\t', '\r', '\n', ':', ',':
			off++
			continue
		}
		break
	}
	return off
}

// lineOf is the 1-based line of byte offset off.
func lineOf(data []byte, off int64) int {
	off = max(0, min(off, int64(len(data))))
	return 1 + bytes.Count(data[:off], []byte{'\n'})
}
