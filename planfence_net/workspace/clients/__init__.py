"""The clients a team uses, one row each (`table`): how a client's hook payload maps into
the normalized form the fence's rules read (`model.payload`) and how the hook's answer maps
back into what the client reads. Installing and checking a client's hooks is `installers`'."""
