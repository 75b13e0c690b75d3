module berth.dev/policy

go 1.24
