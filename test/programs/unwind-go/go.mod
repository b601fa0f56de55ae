module unwindgo

go 1.19
