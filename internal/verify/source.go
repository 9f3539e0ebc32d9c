package verify

import (
	"fmt"

	"github.com/tidwall/gjson"
	"golang.org/x/net/http/httpguts"

	"github.com/hookstamp/hookstamp/internal/extract"
)

// sigSource is where the signature is read: a header or a member of the
// JSON body.
type sigSource struct {
	header string
	json   string
}

func newSigSource(header, json string) (sigSource, error) {
	switch {
	case header != "" && json != "":
		return sigSource{}, fmt.Errorf("json: the signature is read from header %s or from the body, not both", header)
	case json != "":
		if !PlainPath(json) {
			return sigSource{}, fmt.Errorf("json: %q is not a plain path (names and indexes separated by dots)", json)
		}
		return sigSource{json: json}, nil
	case header == "":
		header = DefaultHeader
	}
	if !httpguts.ValidHeaderFieldName(header) {
		return sigSource{}, fmt.Errorf("header: %q is not a valid header name", header)
	}
	return sigSource{header: header}, nil
}

func (s sigSource) String() string {
	if s.json != "" {
		return "body member " + s.json
	}
	return s.header + " header"
}

// read returns the value carrying the signature: the one header value, or
// the string at the JSON path of a body that names no member on the path
// twice.
func (s sigSource) read(r Request) ([]byte, error) {
	if s.header != "" {
		return single(r, s.header)
	}
	return jsonString(r.Body(), s.json)
}

// jsonAt returns the value at path in body, refusing a body that is not
// JSON or names a member on the path twice, or in another case.
func jsonAt(body []byte, path string) (gjson.Result, error) {
	if !extract.ValidJSON(body) {
		return gjson.Result{}, reject("body is not valid JSON or nests deeper than %d", extract.MaxJSONDepth)
	}
	if DuplicateOnPath(body, path) {
		return gjson.Result{}, reject("body names a member on %s more than once, or in another case", path)
	}
	return gjson.GetBytes(body, path), nil
}

// jsonString returns the non-empty string at path in body.
func jsonString(body []byte, path string) ([]byte, error) {
	res, err := jsonAt(body, path)
	switch {
	case err != nil:
		return nil, err
	case !res.Exists():
		return nil, reject("missing %s in the body", path)
	case res.Type != gjson.String:
		return nil, reject("%s in the body is not a string", path)
	case res.Str == "":
		return nil, reject("empty %s in the body", path)
	case len(res.Str) > MaxHeaderLen:
		return nil, reject("%s in the body too long", path)
	}
	return []byte(res.Str), nil
}

// jsonScalar returns the text of the string or number at path.
func jsonScalar(body []byte, path string) ([]byte, error) {
	res, err := jsonAt(body, path)
	if err != nil {
		return nil, err
	}
	switch res.Type {
	case gjson.String:
		return []byte(res.Str), nil
	case gjson.Number:
		return []byte(res.Raw), nil
	}
	return nil, reject("missing %s in the body", path)
}
