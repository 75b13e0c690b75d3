module p

go 1.24

require berth.dev/policy v0.0.0

replace berth.dev/policy => ./sdk
