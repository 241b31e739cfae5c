package leasesim

// mutantTests are the tests of mutants_test.go (built only with -tags
// leasemutants); TestMutantsCaught requires each of them to pass.
var mutantTests = []string{"TestMutantNeverFences", "TestMutantSubtle", "TestMutantBulkReads", "TestMutantSpread", "TestMutantBatched"}
