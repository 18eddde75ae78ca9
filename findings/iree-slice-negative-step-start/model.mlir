module {
  func.func @nncert(%arg0: !torch.vtensor<[1,1,3],f32>) -> !torch.vtensor<[1,1,1],f32> attributes {torch.onnx_meta.ir_version = 10 : si64, torch.onnx_meta.opset_version = 21 : si64, torch.onnx_meta.producer_name = "nncert", torch.onnx_meta.producer_version = ""} {
    %0 = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<n1> : tensor<si64>} : () -> !torch.vtensor<[],si64> 
    %1 = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<n2> : tensor<si64>} : () -> !torch.vtensor<[],si64> 
    %2 = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<n3> : tensor<3xsi64>} : () -> !torch.vtensor<[3],si64> 
    %3 = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<n4> : tensor<si64>} : () -> !torch.vtensor<[],si64> 
    %4 = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<n5> : tensor<3xsi64>} : () -> !torch.vtensor<[3],si64> 
    %5 = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<n6> : tensor<3xi1>} : () -> !torch.vtensor<[3],i1> 
    %6 = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<n7> : tensor<3xsi64>} : () -> !torch.vtensor<[3],si64> 
    %7 = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<n8> : tensor<3xsi64>} : () -> !torch.vtensor<[3],si64> 
    %8 = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<n9> : tensor<3xsi64>} : () -> !torch.vtensor<[3],si64> 
    %none = torch.constant.none
    %9 = torch.operator "onnx.Greater"(%2, %3) : (!torch.vtensor<[3],si64>, !torch.vtensor<[],si64>) -> !torch.vtensor<[3],i1> 
    %10 = torch.operator "onnx.Where"(%9, %1, %0) : (!torch.vtensor<[3],i1>, !torch.vtensor<[],si64>, !torch.vtensor<[],si64>) -> !torch.vtensor<[3],si64> 
    %11 = torch.operator "onnx.Where"(%5, %10, %4) : (!torch.vtensor<[3],i1>, !torch.vtensor<[3],si64>, !torch.vtensor<[3],si64>) -> !torch.vtensor<[3],si64> 
    %12 = torch.operator "onnx.Slice"(%arg0, %11, %6, %7, %2) : (!torch.vtensor<[1,1,3],f32>, !torch.vtensor<[3],si64>, !torch.vtensor<[3],si64>, !torch.vtensor<[3],si64>, !torch.vtensor<[3],si64>) -> !torch.vtensor<[?,?,?],f32> 
    %13 = torch.operator "onnx.Reshape"(%12, %8) : (!torch.vtensor<[?,?,?],f32>, !torch.vtensor<[3],si64>) -> !torch.vtensor<[1,1,1],f32> 
    return %13 : !torch.vtensor<[1,1,1],f32>
  }
}

{-#
  dialect_resources: {
    builtin: {
      n1: "0x080000000000000000000040",
      n2: "0x0800000000000000000000C0",
      n3: "0x0800000003000000000000000100000000000000FEFFFFFFFFFFFFFF",
      n4: "0x080000000000000000000000",
      n5: "0x08000000FFFFFFFFFFFFFFFF0200000000000000FEFFFFFFFFFFFFFF",
      n6: "0x08000000000101",
      n7: "0x08000000020000000000000002000000000000000000000000000000",
      n8: "0x08000000000000000000000001000000000000000200000000000000",
      n9: "0x08000000010000000000000001000000000000000100000000000000"
    }
  }
#-}
