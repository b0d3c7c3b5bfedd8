package pgstore

import "testing"

// A lock claim's transaction applies the relay's settings and the extra
// ones, but not those the pool's caller set.
func TestLocalSettingsKeepTheCallersChoices(t *testing.T) {
	got := localSettings(map[string]string{"jit": "on"}, map[string]string{"idle_in_transaction_session_timeout": "30000"})
	want := "SELECT set_config('enable_bitmapscan', 'off', true), " +
		"set_config('idle_in_transaction_session_timeout', '30000', true), " +
		"set_config('plan_cache_mode', 'force_custom_plan', true)"
	if got != want {
		t.Errorf("localSettings =\n%s\nwant\n%s", got, want)
	}
}
