module {
  func.func @nncert(%arg0: !torch.vtensor<[1,1,1,1],f32>, %arg1: !torch.vtensor<[3,7,1,1],f32>) -> !torch.vtensor<[3,7,1,1],f32> attributes {torch.onnx_meta.ir_version = 10 : si64, torch.onnx_meta.opset_version = 21 : si64, torch.onnx_meta.producer_name = "nncert", torch.onnx_meta.producer_version = ""} {
    %0 = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<n2> : tensor<4xsi64>} : () -> !torch.vtensor<[4],si64> 
    %1 = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<n3> : tensor<4xsi64>} : () -> !torch.vtensor<[4],si64> 
    %2 = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<n4> : tensor<4xsi64>} : () -> !torch.vtensor<[4],si64> 
    %none = torch.constant.none
    %3 = torch.operator "onnx.Add"(%0, %1) : (!torch.vtensor<[4],si64>, !torch.vtensor<[4],si64>) -> !torch.vtensor<[4],si64> 
    %4 = torch.operator "onnx.Slice"(%arg0, %0, %3) : (!torch.vtensor<[1,1,1,1],f32>, !torch.vtensor<[4],si64>, !torch.vtensor<[4],si64>) -> !torch.vtensor<[?,?,?,?],f32> 
    %5 = torch.operator "onnx.Expand"(%4, %2) : (!torch.vtensor<[?,?,?,?],f32>, !torch.vtensor<[4],si64>) -> !torch.vtensor<[3,7,?,?],f32> 
    %6 = torch.operator "onnx.PRelu"(%5, %arg1) : (!torch.vtensor<[3,7,?,?],f32>, !torch.vtensor<[3,7,1,1],f32>) -> !torch.vtensor<[3,7,1,1],f32> 
    return %6 : !torch.vtensor<[3,7,1,1],f32>
  }
}

{-#
  dialect_resources: {
    builtin: {
      n2: "0x080000000000000000000000000000000000000000000000000000000000000000000000",
      n3: "0x080000000100000000000000010000000000000001000000000000000100000000000000",
      n4: "0x080000000300000000000000070000000000000001000000000000000100000000000000"
    }
  }
#-}
