package httpjson

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWrite(t *testing.T) {
	rec := httptest.NewRecorder()
	Write(rec, http.StatusAccepted, map[string]int{"a": 1})
	require.Equal(t, http.StatusAccepted, rec.Code)
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	require.JSONEq(t, `{"a": 1}`, rec.Body.String())

	rec = httptest.NewRecorder()
	Write(rec, http.StatusOK, func() {}) // does not encode
	require.Equal(t, http.StatusInternalServerError, rec.Code)
	require.Contains(t, rec.Body.String(), `"unknown_error"`)
}
