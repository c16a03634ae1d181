package httpjson

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
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

// TestStatusOfEveryCode: each of the protocol's error codes has its
// status, and only a busy thread's refused run start is a conflict.
func TestStatusOfEveryCode(t *testing.T) {
	want := map[protocol.ErrorCode]int{
		protocol.ErrorCodeInvalidArgument: 400, protocol.ErrorCodeUnknownCommand: 400, protocol.ErrorCodeNotSupported: 400,
		protocol.ErrorCodeUnauthenticated: 401, protocol.ErrorCodePermissionDenied: 403,
		protocol.ErrorCodeNoSuchThread: 404, protocol.ErrorCodeNoSuchRun: 404, protocol.ErrorCodeNoSuchSubscription: 404,
		protocol.ErrorCodeNoSuchNamespace: 404, protocol.ErrorCodeNoSuchInterrupt: 404, protocol.ErrorCodeNoSuchCheckpoint: 404,
		protocol.ErrorCodeRateLimited: 429, protocol.ErrorCodeResourceExhausted: 429,
		protocol.ErrorCodeUnavailable: 503, protocol.ErrorCodeUnknownError: 500,
		protocol.ErrorCode("newer_than_this_table"): 500,
	}
	for code, status := range want {
		require.Equal(t, status, StatusOf(code), code)
	}
	busy := protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "whatever the wording")
	busy.Extra = map[string]any{"reason": server.ReasonThreadBusy}
	status, e := CommandError(busy)
	require.Equal(t, 409, status, "chosen by the reason, not the message")
	require.Nil(t, e.ID)
	status, _ = CommandError(protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "thread t has an active run (r1) and multitask_strategy is reject"))
	require.Equal(t, 400, status, "a message alone decides nothing")
	status, _ = CommandError(protocol.NewError(nil, protocol.ErrorCodeNoSuchRun, "no run r2"))
	require.Equal(t, 404, status)
	status, e = CommandError(errors.New("disk on fire"))
	require.Equal(t, 500, status)
	require.Equal(t, protocol.ErrorCodeUnknownError, e.Code)
}

// TestRefusalIsTheOneTable: each of the core's errors answers with its own
// code and the status its code and reason give, wrapped or not; an error
// without a code is unavailable (503).
func TestRefusalIsTheOneTable(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		code   protocol.ErrorCode
	}{
		{server.ErrThreadID, 400, protocol.ErrorCodeInvalidArgument},
		{fmt.Errorf("%w: 300 bytes", server.ErrThreadID), 400, protocol.ErrorCodeInvalidArgument},
		{server.ErrTooManyThreads, 429, protocol.ErrorCodeResourceExhausted},
		{server.ErrQuota, 429, protocol.ErrorCodeResourceExhausted},
		{server.ErrTooLarge, 413, protocol.ErrorCodeResourceExhausted},
		{server.ErrPermissionDenied, 403, protocol.ErrorCodePermissionDenied},
		{server.ErrUnauthenticated, 401, protocol.ErrorCodeUnauthenticated},
		{server.ErrNoSuchThread, 404, protocol.ErrorCodeNoSuchThread},
		{server.ErrThreadExists, 409, protocol.ErrorCodeInvalidArgument},
		{server.ErrThreadBusy, 409, protocol.ErrorCodeInvalidArgument},
		{server.ErrNotTheWriter, 409, protocol.ErrorCodeUnavailable},
		{server.ErrRunEnded, 409, protocol.ErrorCodeNoSuchRun},
		{server.ErrNoSuchWorker, 404, protocol.ErrorCodeInvalidArgument},
		{server.ErrNoCatalog, 501, protocol.ErrorCodeNotSupported},
		{server.ErrUnavailable, 503, protocol.ErrorCodeUnavailable},
		{errors.New("disk on fire"), 503, protocol.ErrorCodeUnavailable},
		{protocol.NewError(nil, protocol.ErrorCodeNoSuchRun, "x"), 404, protocol.ErrorCodeNoSuchRun},
	} {
		status, e := Refusal(tc.err)
		require.Equal(t, tc.status, status, "%v", tc.err)
		require.Equal(t, tc.code, e.Code, "%v", tc.err)
		var resp *protocol.ErrorResponse
		if !errors.As(tc.err, &resp) {
			require.Equal(t, tc.err.Error(), e.Message)
		}
	}
}
